// A weight matrix converted at load into another stored dtype (`--lm-head-dtype`): the decode
// step reads lm_head every token, and in the DeepSeek checkpoints (FP8 ones included) it is
// BF16, [vocab, D] = 420 MB of V3's 750 MB per token in FP8 (docs/BENCHMARKS.md "lm_head dtype").
#pragma once

#include <cstdint>

#include "core/aligned_buffer.h"
#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/linear.h"
#include "mla/status.h"

namespace mla {

// The layouts written: codes with one FP32 scale per block of kRequantBlock × kRequantBlock
// values, DeepSeek's own block-FP8 layout, so every linear kernel runs them as it runs an FP8
// checkpoint (kernels/linear.h, block-scaled dtypes).
//   FP8:  scale = amax / 448 of the block's finite values, code = e4m3(w / scale) (round to
//         nearest even, saturating): a normal code is within 2^-4 of w relatively, a subnormal
//         one (|w| < 2^-6 · scale) within 2^-10 · scale absolutely. NaN stays NaN; ±inf
//         saturates.
//   INT8: scale = amax / 127, code = round(w / scale) in [−127, 127]: within scale / 2 of w
//         absolutely (uniform steps: for Gaussian-like rows about 3× the FP8 accuracy at the same
//         bytes). A NaN makes its block's scale NaN (the block's outputs NaN); ±inf saturates.
inline constexpr int kRequantBlock = 128;

struct RequantizedWeight {
  AlignedBuffer<uint8_t> data;  // [out, in] in the new dtype
  AlignedBuffer<float> scales;  // FP8, INT8: [ceil(out / 128), ceil(in / 128)]
  LinearWeight weight;          // points into data / scales
};

// w (BF16, F16, F32 or block-scaled) as `to` (kBF16: round to nearest even; kF8E4M3, kI8: the
// layouts above). invalid_argument for another `to` or an invalid w; out_of_memory naming `what`.
Result<RequantizedWeight> requantize_weight(const LinearWeight& w, DType to, ThreadPool& pool,
                                            const std::string& what);

// Bytes requantize_q8_0 writes for w: its out · in / 32 Q8_0 blocks (34 bytes), rounded up to 64.
size_t q8_0_weight_bytes(const LinearWeight& w);

// w (BF16, F16, F32, or block-scaled FP8 / INT8) requantised at `dst` (q8_0_weight_bytes(w) bytes,
// 64-byte aligned) as Q8_0 (`--weight-dtype q8_0`): each row's real values (FP8: code · scale in
// FP32) in blocks of 32 as quantize_row makes them (d = amax / 127 stored as f16, codes rounded
// half away from zero), so a value moves by at most d / 2 + 127 · |f16(d) − d| ≤ d · (1/2 +
// 127 · 2^-11). `to` kQ8_0 writes the rows, kQ8_0R16 their repacked layout (core/ggml_repack.h;
// repack_fits). Then the int8 kernels run the weight: prefill on vpdpbusd at twice the BF16 dot
// product's rate, where an FP8 weight widens to BF16. With `drop_source`, as repack_weight.
// invalid_argument naming `what` for another dtype, a row not of whole blocks of 32, a shape `to`
// cannot hold, or a value quantize_row refuses (non-finite, or a block whose scale overflows f16).
Result<LinearWeight> requantize_q8_0(const LinearWeight& w, DType to, ThreadPool& pool,
                                     uint8_t* dst, const std::string& what, bool drop_source);

// Memory for weights re-laid at load: one anonymous mapping, 2 MiB aligned, advised for
// transparent huge pages and taken whole when allocated (MADV_POPULATE_WRITE, Linux 5.14). A mapped
// file's weights come in the page cache's large folios without advice, but anonymous memory under
// THP "madvise" would be 4 KiB pages, and a decode step reads every active weight through the TLB
// (on Zen 5 the repacked Q8_0 model decoded 8% slower on 4 KiB pages: docs/BENCHMARKS.md "Q8_0
// repacked at load").
class WeightArena {
 public:
  WeightArena() = default;
  // out_of_memory naming `what` when the mapping is refused.
  static Result<WeightArena> allocate(size_t bytes, ThreadPool& pool, const std::string& what);
  WeightArena(WeightArena&& o) noexcept;
  WeightArena& operator=(WeightArena&& o) noexcept;
  WeightArena(const WeightArena&) = delete;
  WeightArena& operator=(const WeightArena&) = delete;
  ~WeightArena();
  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  // Bytes of the arena the kernel holds on transparent huge pages now (AnonHugePages of its
  // mappings in /proc/self/smaps); -1 where that cannot be read. What the advice got: a host
  // whose free memory is fragmented falls back to 4 KiB pages.
  int64_t huge_page_bytes() const;

 private:
  void* map_ = nullptr;  // the mapping (a 2 MiB-aligned data_ lies inside it)
  size_t map_size_ = 0, size_ = 0;
  uint8_t* data_ = nullptr;
};

// Bytes repack_weight writes at dst for w, a multiple of 64: its values (dtype_bytes(w.dtype,
// w.in) · w.out, rounded up to 64), then, for a block-scaled dtype, a copy of its F32 scale grid.
// The scales come along because a mapped file's pages can be reclaimed: with the values dropped
// from the file, a model near the size of RAM evicted the scattered scale pages, and each decode
// step faulted them back with a readahead of the values around them (the 27-layer FP8 model decoded
// at 0.6 of the read probe instead of 0.9: docs/BENCHMARKS.md "Repacked weights in anonymous
// memory").
size_t repacked_weight_bytes(const LinearWeight& w);

// w re-laid at `dst` (repacked_weight_bytes(w) bytes, 64-byte aligned) as `to`, a layout of the
// same values that the kernels run faster (linear_preferred_dtype: Q8_0 → kQ8_0R16, Q4_K →
// kQ4_KR16, BF16 → kBF16R16, FP8 → kF8E4M3R16, core/ggml_repack.h); returns the weight over dst
// (values and scales). With `drop_source`, the whole pages of w's values are then dropped from
// the process (MADV_DONTNEED): for a mapped file, whose pages are read again from it if touched,
// so the file's copy stops counting next to the new one (advised cold first, so the page cache
// gives them up before pages still read). invalid_argument for another pair of dtypes or a shape
// `to` cannot hold.
Result<LinearWeight> repack_weight(const LinearWeight& w, DType to, ThreadPool& pool, uint8_t* dst,
                                   const std::string& what, bool drop_source);

}  // namespace mla
