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

}  // namespace mla
