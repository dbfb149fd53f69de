// Sizing of the paged KV cache: page size rules, page bytes, and how many blocks a byte budget (or
// a fraction of the machine's available memory) buys. Arithmetic and /proc parsing only, no memory.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "mla/status.h"

namespace mla {

inline constexpr int kDefaultPageSize = 64;
inline constexpr int kMaxPageSize = 256;
// Page bases are aligned to this many bytes in every layer (cache line, zmm, bulk copies).
inline constexpr int64_t kKvPageAlignBytes = 64;
// Block ids are int32 (the kernels' block_table); a pool holds at most this many blocks.
inline constexpr int64_t kMaxKvBlocks = INT32_MAX;

// OK when page_size is a power of two in [1, kMaxPageSize]; otherwise invalid_argument naming it.
Status validate_page_size(int page_size);

// Bytes of one page of one layer, page_size · record_bytes. The kernels index a layer's cache as a
// dense [num_blocks, page_size, record] array, so pages are not padded; instead this rejects
// (invalid_argument) a page whose size is not a multiple of kKvPageAlignBytes, which would leave
// later page bases unaligned. At r = 512, d_r = 64 every page size works for bf16 (1,152 B), and
// page_size >= 4 for fp8/int8 (656 B) and >= 2 for nvfp4 (416 B). Also validates page_size and
// record_bytes > 0.
Result<int64_t> kv_page_bytes(int64_t record_bytes, int page_size);

// Blocks that fit in budget_bytes when each block holds one page in each of num_layers layers:
// floor(budget / (num_layers · kv_page_bytes)), capped at kMaxKvBlocks. invalid_argument when the
// arguments are invalid or the budget holds no block at all (the message gives the sizes).
// Overflow-checked: any record_bytes, num_layers up to INT32_MAX.
Result<int32_t> num_blocks_for_budget(uint64_t budget_bytes, int64_t record_bytes, int num_layers,
                                      int page_size);

// MemAvailable of a /proc/meminfo text, in bytes. data_loss when the line is missing or malformed.
Result<uint64_t> parse_mem_available(std::string_view meminfo);
// Reads and parses `path` (io_error when it cannot be read).
Result<uint64_t> read_mem_available(const std::string& path = "/proc/meminfo");
// floor(fraction · MemAvailable) for `--kv-cache-bytes` given as a fraction of free memory;
// fraction must be in (0, 1] (invalid_argument otherwise).
Result<uint64_t> budget_from_available_fraction(double fraction,
                                                const std::string& path = "/proc/meminfo");

}  // namespace mla
