// The ISA bodies of kernels/activation.h.
#pragma once

#include <cstdint>

namespace mla::cpu {

void silu_mul_avx512(float* g, const float* u, int64_t n);

}  // namespace mla::cpu
