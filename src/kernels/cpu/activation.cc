// kernels/activation.h: the entry points, on the best ISA this CPU has (in the CPU kernels'
// library, whose weight products apply SwiGLU to the chunks they make: kernels/linear.h
// LinearJob::up).
#include "kernels/activation.h"

#include <cmath>

#include "core/cpu_features.h"
#include "kernels/cpu/activation_cpu.h"

namespace mla {

void silu_mul(float* g, const float* u, int64_t n) {
  if (cpu_supports(CpuIsa::kAvx512)) return cpu::silu_mul_avx512(g, u, n);
  for (int64_t i = 0; i < n; ++i) {
    const float e = std::exp(-std::abs(g[i]));  // as the AVX-512 body: e^-|x| never overflows
    g[i] = g[i] * ((g[i] < 0 ? e : 1.0f) / (1.0f + e)) * u[i];
  }
}

}  // namespace mla
