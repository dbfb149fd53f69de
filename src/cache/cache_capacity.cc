// Page-size checks, page bytes, budget → block count, and MemAvailable from /proc/meminfo.
#include "cache/cache_capacity.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <fstream>
#include <sstream>

#include "core/checked_math.h"

namespace mla {

Status validate_page_size(int page_size) {
  if (page_size < 1 || page_size > kMaxPageSize || (page_size & (page_size - 1)) != 0)
    return invalid_argument(
        fmt::format("page_size {} must be a power of two in [1, {}]", page_size, kMaxPageSize));
  return Status::ok_status();
}

Result<int64_t> kv_page_bytes(int64_t record_bytes, int page_size) {
  MLA_RETURN_IF_ERROR(validate_page_size(page_size));
  // A record above 2^40 bytes is no KV record; the bound keeps page_size · record in int64.
  if (record_bytes <= 0 || record_bytes > (int64_t{1} << 40))
    return invalid_argument(
        fmt::format("KV record of {} bytes per token must be in [1, 2^40]", record_bytes));
  const int64_t page = *checked_mul<int64_t>(record_bytes, page_size);  // <= 2^48 by the bound
  if (page % kKvPageAlignBytes != 0) {
    int min_page = page_size;
    while (min_page <= kMaxPageSize && (record_bytes * min_page) % kKvPageAlignBytes != 0)
      min_page *= 2;
    return invalid_argument(fmt::format(
        "page_size {} with {}-byte KV records gives {}-byte pages, not a multiple of {} (page "
        "bases must stay aligned); use page_size >= {}",
        page_size, record_bytes, page, kKvPageAlignBytes, min_page));
  }
  return page;
}

Result<int32_t> num_blocks_for_budget(uint64_t budget_bytes, int64_t record_bytes, int num_layers,
                                      int page_size) {
  MLA_ASSIGN_OR_RETURN(const int64_t page, kv_page_bytes(record_bytes, page_size));
  if (num_layers < 1)
    return invalid_argument(fmt::format("num_layers {} must be >= 1", num_layers));
  // page <= 2^48 and num_layers < 2^31: the product fits in unsigned 128 but maybe not 64 bits.
  const unsigned __int128 block_bytes = static_cast<unsigned __int128>(page) * num_layers;
  const unsigned __int128 blocks = budget_bytes / block_bytes;
  if (blocks == 0) {
    const std::string total = block_bytes > UINT64_MAX
                                  ? std::string("over 2^64")
                                  : std::to_string(static_cast<uint64_t>(block_bytes));
    return invalid_argument(fmt::format(
        "KV cache budget of {} bytes holds no block: one block is {} layers x {} bytes = {} bytes",
        budget_bytes, num_layers, page, total));
  }
  return static_cast<int32_t>(blocks > kMaxKvBlocks ? kMaxKvBlocks : blocks);
}

Result<uint64_t> parse_mem_available(std::string_view meminfo) {
  constexpr std::string_view kKey = "MemAvailable:";
  size_t pos = 0;
  while (pos < meminfo.size()) {
    size_t end = meminfo.find('\n', pos);
    if (end == std::string_view::npos) end = meminfo.size();
    std::string_view line = meminfo.substr(pos, end - pos);
    pos = end + 1;
    if (!line.starts_with(kKey)) continue;
    line.remove_prefix(kKey.size());
    while (!line.empty() && line.front() == ' ') line.remove_prefix(1);
    uint64_t kib = 0;
    auto [p, ec] = std::from_chars(line.data(), line.data() + line.size(), kib);
    std::string_view unit(p, line.data() + line.size() - p);
    if (ec != std::errc() || unit != " kB" || kib > UINT64_MAX / 1024)
      return data_loss(fmt::format("meminfo: malformed MemAvailable line '{}{}'", kKey, line));
    return kib * 1024;
  }
  return data_loss("meminfo: no MemAvailable line");
}

Result<uint64_t> read_mem_available(const std::string& path) {
  std::ifstream in(path);
  if (!in) return io_error(fmt::format("cannot read {}", path));
  std::stringstream ss;
  ss << in.rdbuf();
  auto r = parse_mem_available(ss.str());
  if (!r.ok()) return data_loss(fmt::format("{}: {}", path, r.status().message()));
  return r;
}

Result<uint64_t> budget_from_available_fraction(double fraction, const std::string& path) {
  if (!(fraction > 0.0 && fraction <= 1.0))
    return invalid_argument(fmt::format("memory fraction {} must be in (0, 1]", fraction));
  MLA_ASSIGN_OR_RETURN(const uint64_t avail, read_mem_available(path));
  const double bytes = std::floor(fraction * static_cast<double>(avail));
  return bytes >= 0x1.0p64 ? avail : static_cast<uint64_t>(bytes);  // avail near 2^64 rounds up
}

}  // namespace mla
