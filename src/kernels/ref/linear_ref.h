// The reference (oracle) for the weight products of kernels/linear.h: plain loops in FP64 over the
// stored weight bytes, dequantised element by element with core/dtype.h's scalar conversions.
// Independent of kernels/cpu by construction. Slow on purpose; never call it on a hot path.
#pragma once

#include <cstdint>

#include "kernels/linear.h"

namespace mla::ref {

// W_real[i][j] in FP64: the stored element, times weight_scale_inv[i / block_rows][j / block_cols]
// for FP8 and int8 (exact: an E4M3 value has 4 significant bits, an int8 8, an F32 scale 24).
double linear_weight(const LinearWeight& w, int64_t i, int64_t j);
// Row i of W_real: row[j] = linear_weight(w, i, j) for j < w.in, the dtype dispatch and scale
// lookup once per row / block instead of per element (model load splits kv_b_proj with it).
void linear_weight_row(const LinearWeight& w, int64_t i, double* row);

// y[r][i] = Σ_j x[r][j] · W_real[i][j], summed in FP64.
//   w [out, in] (validated);  x [n, in] fp32;  y [n, out] fp64
void linear(const LinearWeight& w, int64_t n, const float* x, double* y);

}  // namespace mla::ref
