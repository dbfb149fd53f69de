// VecAvx2: 8 FP32 lanes (AVX2 + FMA). Include only after `#pragma GCC target("avx2,fma")`;
// internal linkage so no instantiation leaks into code run on CPUs without AVX2.
#pragma once

#include <immintrin.h>

#include "kernels/cpu/vec_exp.h"

namespace mla::cpu {
namespace {

struct VecAvx2 {
  static constexpr int kWidth = 8;
  static constexpr const char* kIsa = "avx2";
  __m256 v;
  static VecAvx2 zero() { return {_mm256_setzero_ps()}; }
  static VecAvx2 set1(float x) { return {_mm256_set1_ps(x)}; }
  static VecAvx2 load(const float* p) { return {_mm256_loadu_ps(p)}; }
  void store(float* p) const { _mm256_storeu_ps(p, v); }
  // a < b ? x : y, per lane.
  static VecAvx2 where_lt(VecAvx2 a, VecAvx2 b, VecAvx2 x, VecAvx2 y) {
    return {_mm256_blendv_ps(y.v, x.v, _mm256_cmp_ps(a.v, b.v, _CMP_LT_OQ))};
  }
  float reduce_max() const {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
  }
  float reduce_add() const {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static VecAvx2 exp(VecAvx2 x) {
    const __m256 dead = _mm256_cmp_ps(x.v, _mm256_set1_ps(ExpConst::kMin), _CMP_LT_OQ);
    // max/min return their second operand when one is NaN: keep x second so NaN survives.
    __m256 t = _mm256_min_ps(_mm256_set1_ps(ExpConst::kMax),
                             _mm256_max_ps(_mm256_set1_ps(ExpConst::kMin), x.v));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(t, _mm256_set1_ps(ExpConst::kLog2e)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(ExpConst::kLn2Hi), t);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(ExpConst::kLn2Lo), r);
    __m256 p = _mm256_set1_ps(ExpConst::kC[7]);
    for (int i = 6; i >= 0; --i) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ExpConst::kC[i]));
    __m256i e =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    __m256 y = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
    return {_mm256_andnot_ps(dead, y)};
  }
};

// Free functions, not in-class friends: GCC does not apply `#pragma GCC target` to friends
// defined inside a class.
inline VecAvx2 fma(VecAvx2 a, VecAvx2 b, VecAvx2 c) {
  return {_mm256_fmadd_ps(a.v, b.v, c.v)};
}
inline VecAvx2 operator+(VecAvx2 a, VecAvx2 b) {
  return {_mm256_add_ps(a.v, b.v)};
}
inline VecAvx2 operator-(VecAvx2 a, VecAvx2 b) {
  return {_mm256_sub_ps(a.v, b.v)};
}
inline VecAvx2 operator*(VecAvx2 a, VecAvx2 b) {
  return {_mm256_mul_ps(a.v, b.v)};
}
inline VecAvx2 max(VecAvx2 a, VecAvx2 b) {
  return {_mm256_max_ps(a.v, b.v)};
}

}  // namespace
}  // namespace mla::cpu
