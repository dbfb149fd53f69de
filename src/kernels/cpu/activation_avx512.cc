// kernels/activation.h on AVX-512F: 16 lanes per step, the tail under a mask.
#include "kernels/cpu/activation_cpu.h"
#include "kernels/cpu/isa_prelude.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")

#include "kernels/cpu/vec_avx512.h"

namespace mla::cpu {

// sigmoid(x) = 1 / (1 + e^-|x|) for x ≥ 0 and e^-|x| / (1 + e^-|x|) below: e^-|x| never
// overflows, and only underflows (to 0, for x < −87.33, where |silu(x) · u| < |x · u| · 2^-126).
void silu_mul_avx512(float* g, const float* u, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
    const __m512 x = _mm512_maskz_loadu_ps(m, g + i), y = _mm512_maskz_loadu_ps(m, u + i);
    const __m512 e = VecAvx512::exp({_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(x))}).v;
    const __mmask16 neg = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
    const __m512 sig = _mm512_div_ps(_mm512_mask_blend_ps(neg, one, e), _mm512_add_ps(one, e));
    _mm512_mask_storeu_ps(g + i, m, _mm512_mul_ps(_mm512_mul_ps(x, sig), y));
  }
}

}  // namespace mla::cpu

#pragma GCC pop_options
