// Pieces shared by the int8 attention tiles (AVX512-VNNI: vpdpbusd, u8 × s8 in quads of four
// products per int32 lane): values to int8 codes with one amax / 127 scale, and lanes' low bytes
// packed into quads. Include inside the ISA's target region. Internal linkage.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <limits>

namespace mla::cpu {
namespace {

// codes[0, d) = rne(x / s) + offset with s = amax / 127 (0 for an all-zero part: codes = offset),
// as bytes; returns s, and Σ (codes − offset) in *sum. A NaN among x makes s NaN (vmaxps alone
// would drop it), so that every product scaled by s is NaN as it would be unquantised.
inline float quantize_part_s8(const float* x, int d, int offset, uint8_t* codes, int32_t* sum) {
  __m512 amax = _mm512_setzero_ps();
  __mmask16 nan = 0;
  for (int c = 0; c < d; c += 16) {
    const __mmask16 m = __mmask16(d - c >= 16 ? 0xFFFF : (1u << (d - c)) - 1);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + c);
    nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    amax = _mm512_max_ps(amax, _mm512_abs_ps(v));
  }
  const float a = nan ? std::numeric_limits<float>::quiet_NaN() : _mm512_reduce_max_ps(amax);
  const float s = a / 127.0f, inv = a > 0 ? 1.0f / s : 0.0f;
  const __m512 vinv = _mm512_set1_ps(inv);
  const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127),
                off = _mm512_set1_epi32(offset);
  __m512i total = _mm512_setzero_si512();
  for (int c = 0; c < d; c += 16) {
    const __mmask16 m = __mmask16(d - c >= 16 ? 0xFFFF : (1u << (d - c)) - 1);
    __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + c), vinv));
    q = _mm512_min_epi32(_mm512_max_epi32(q, lo), hi);
    total = _mm512_add_epi32(total, q);
    _mm512_mask_cvtepi32_storeu_epi8(codes + c, m, _mm512_add_epi32(q, off));
  }
  *sum = _mm512_reduce_add_epi32(total);
  return s;
}

// Byte j of each lane from lane values x0 .. x3 (low bytes).
inline __m512i quad_bytes(__m512i x0, __m512i x1, __m512i x2, __m512i x3) {
  const __m512i b = _mm512_set1_epi32(0xFF);
  return _mm512_or_si512(
      _mm512_or_si512(_mm512_and_si512(x0, b), _mm512_slli_epi32(_mm512_and_si512(x1, b), 8)),
      _mm512_or_si512(_mm512_slli_epi32(_mm512_and_si512(x2, b), 16), _mm512_slli_epi32(x3, 24)));
}

// acc + dot4(u8, s8) per int32 lane (vpdpbusd) with the accumulator updated in place: through the
// intrinsic GCC 12 kept a second copy of a loop's 16 accumulators and moved them back every
// iteration (one vmovdqa per product, and spills).
inline __m512i dpbusd_in_place(__m512i acc, __m512i u8, __m512i s8) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u8), "vm"(s8));
  return acc;
}

// acc[r][k] = Σ_{t4 < nq} dot4(pq[t4][i + r], vq[t4][ch + 16k ..]) for NR rows from i and 64
// channels from ch: P·V with the probabilities as u8 quads of four tokens (one lane a row,
// broadcast) and V as s8 token quads (one lane a channel). The callers scale and add it to O.
template <int NR>
inline void pv_quads_int8(const uint32_t* pq, int ld, const uint32_t* vq, int dv_pad, int nq, int i,
                          int ch, __m512i (&acc)[NR][4]) {
  for (auto& a : acc)
    for (auto& x : a) x = _mm512_setzero_si512();
  for (int t4 = 0; t4 < nq; ++t4) {
    const uint32_t* v = vq + int64_t(t4) * dv_pad + ch;
    __m512i vv[4];
    for (int k = 0; k < 4; ++k) vv[k] = _mm512_load_si512(v + 16 * k);
    const uint32_t* pr = pq + int64_t(t4) * ld + i;
    for (int r = 0; r < NR; ++r) {
      const __m512i a = _mm512_set1_epi32(int(pr[r]));
      for (int k = 0; k < 4; ++k) acc[r][k] = dpbusd_in_place(acc[r][k], a, vv[k]);
    }
  }
}

}  // namespace
}  // namespace mla::cpu
