// Elementwise activations of the model's FFN, on the best ISA of the CPU (AVX-512 where present,
// a scalar loop elsewhere; MLA_ISA caps it as for every kernel).
#pragma once

#include <cstdint>

namespace mla {

// SwiGLU's gate in place: g[i] = silu(g[i]) · u[i] = g[i] · sigmoid(g[i]) · u[i], FP32, with
// sigmoid from e^-|x| (no overflow; a −inf gate gives NaN, as −inf · 0). The AVX-512 exp
// (kernels/cpu/vec_exp.h) is within 7e-9 of e^x before its FP32 rounding and flushes results
// below 2^-126 to 0, so the two paths differ by a few FP32 units in the last place.
void silu_mul(float* g, const float* u, int64_t n);

}  // namespace mla
