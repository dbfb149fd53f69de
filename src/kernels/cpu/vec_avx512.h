// VecAvx512: 16 FP32 lanes (AVX-512F). Include only after `#pragma GCC target("avx512f,...")`;
// internal linkage so no instantiation leaks into code run on CPUs without AVX-512.
#pragma once

#include <immintrin.h>

#include "kernels/cpu/vec_exp.h"

namespace mla::cpu {
namespace {

struct VecAvx512 {
  static constexpr int kWidth = 16;
  static constexpr const char* kIsa = "avx512";
  __m512 v;
  static VecAvx512 zero() { return {_mm512_setzero_ps()}; }
  static VecAvx512 set1(float x) { return {_mm512_set1_ps(x)}; }
  static VecAvx512 load(const float* p) { return {_mm512_loadu_ps(p)}; }
  void store(float* p) const { _mm512_storeu_ps(p, v); }
  // a < b ? x : y, per lane.
  static VecAvx512 where_lt(VecAvx512 a, VecAvx512 b, VecAvx512 x, VecAvx512 y) {
    return {_mm512_mask_blend_ps(_mm512_cmp_ps_mask(a.v, b.v, _CMP_LT_OQ), y.v, x.v)};
  }
  float reduce_max() const { return _mm512_reduce_max_ps(v); }
  float reduce_add() const { return _mm512_reduce_add_ps(v); }
  static VecAvx512 exp(VecAvx512 x) {
    // "not less than" is true for NaN, so NaN flows through (min returns its second operand).
    const __mmask16 live = _mm512_cmp_ps_mask(x.v, _mm512_set1_ps(ExpConst::kMin), _CMP_NLT_UQ);
    __m512 t = _mm512_min_ps(_mm512_set1_ps(ExpConst::kMax), x.v);
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(t, _mm512_set1_ps(ExpConst::kLog2e)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(ExpConst::kLn2Hi), t);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(ExpConst::kLn2Lo), r);
    __m512 p = _mm512_set1_ps(ExpConst::kC[7]);
    for (int i = 6; i >= 0; --i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ExpConst::kC[i]));
    // scalef computes p · 2^n without building the exponent by hand.
    return {_mm512_maskz_scalef_ps(live, p, n)};
  }
};

// Free functions, not in-class friends: GCC does not apply `#pragma GCC target` to friends
// defined inside a class.
inline VecAvx512 fma(VecAvx512 a, VecAvx512 b, VecAvx512 c) {
  return {_mm512_fmadd_ps(a.v, b.v, c.v)};
}
inline VecAvx512 operator+(VecAvx512 a, VecAvx512 b) {
  return {_mm512_add_ps(a.v, b.v)};
}
inline VecAvx512 operator-(VecAvx512 a, VecAvx512 b) {
  return {_mm512_sub_ps(a.v, b.v)};
}
inline VecAvx512 operator*(VecAvx512 a, VecAvx512 b) {
  return {_mm512_mul_ps(a.v, b.v)};
}
inline VecAvx512 max(VecAvx512 a, VecAvx512 b) {
  return {_mm512_max_ps(a.v, b.v)};
}

}  // namespace
}  // namespace mla::cpu
