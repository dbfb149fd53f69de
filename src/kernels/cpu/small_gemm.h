// Small FP32 matrix products for the absorbed path (one head's W_UK or W_UV at a time), written
// here so that the engine needs no BLAS library: n (queries) is small, the weight matrix is read
// once per block of 4 rows of x. Compiled for AVX-512, AVX2 and baseline x86-64, the best one
// this CPU has picked at the first call. FP32 accumulation in a fixed order (deterministic).
#pragma once

#include <cstdint>

namespace mla::cpu {

// y[i, :] = Σ_j x[i, j] · w[j, :]   x [n, in] (row stride ldx), w [in, out] (rows of out),
//                                   y [n, out] (row stride ldy)
void gemm_xw(int n, int in, int out, const float* x, int64_t ldx, const float* w, float* y,
             int64_t ldy);

// y[i, o] = Σ_j x[i, j] · w[o, j]   x [n, in] (row stride ldx), w [out, in] (rows of in),
//                                   y [n, out] (row stride ldy)
void gemm_xwt(int n, int in, int out, const float* x, int64_t ldx, const float* w, float* y,
              int64_t ldy);

}  // namespace mla::cpu
