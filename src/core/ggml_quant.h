// The block-quantised weight formats of GGUF files (DType::kQ8_0 ... kQ6_K; layouts in
// docs/GGUF.md): plain scalar dequantisers, the reference every SIMD kernel is checked against
// and bit-exact with the `gguf` package's numpy dequantisers, and the quantisers `mla quantize`
// writes files with. Rows only: a row of n values is n / block_elems whole blocks.
#pragma once

#include <cstdint>
#include <span>

#include "core/dtype.h"
#include "mla/status.h"

namespace mla {

// out[0, n) = the values of the blocks at `src` (n / dtype_block(t).elems blocks). Every
// operation is the FP32 one the format defines (an f16 scale widened exactly, products and sums
// in FP32 in the order docs/GGUF.md gives), so results are bit-exact with the `gguf` package.
// t: a block format, or kF32 / kF16 / kBF16 (widened). invalid_argument for another dtype or an
// n that is not a whole number of blocks.
Status dequantize_row(DType t, const uint8_t* src, int64_t n, float* out);

// Quantises x[0, n) into n / block_elems blocks at `dst` (dtype_block(t).bytes each).
// t: kQ8_0, kQ4_0, kQ2_K, kQ3_K, kQ4_K, kQ5_K, kQ6_K, or kF16 / kBF16 / kF32.
// Round to nearest. Q8_0, Q4_0, F16 and BF16 round exactly as ggml's reference quantisers (and the
// `gguf` package) do, byte for byte, and ignore `importance`. The K formats choose each
// sub-block's scale (and min) by a small search that minimises the squared error of the block,
// weighted by `importance` when it is given (n non-negative values, e.g. an imatrix) and by
// x² plus the mean square of the 256-value super-block otherwise; the result is never worse, by
// that measure, than plain max-min / max-magnitude scales. Non-finite input or importance, a
// negative importance, or values whose FP16 scale (or F16 value) would overflow:
// invalid_argument naming the index (the block, for a scale).
Status quantize_row(DType t, std::span<const float> x, uint8_t* dst,
                    std::span<const float> importance = {});

// Whether quantize_row supports t.
bool can_quantize(DType t);

}  // namespace mla
