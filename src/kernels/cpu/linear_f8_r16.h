// The FP32 products of a kF8E4M3R16 weight (block-FP8 repacked at load, core/ggml_repack.h) for
// the FP32 paths of linear_driver.h, as linear_bf16_r16.h does for kBF16R16: decode (and every
// product below lin_gemm_min_rows rows of x on path kBf16; on kBf16Gemm those take the BF16 dot
// products of linear_r16_dot.h), and every n on paths kAuto / kDot. Products of more rows on those
// paths take the BF16 GEMM (linear_gemm_bf16.h).
//
// 64 bytes of the layout are pairs p and p + 1 of 16 rows. They widen (F8Widen,
// linear_gemm_bf16.h) to two vectors of BF16 pairs (value · 2^-8, exact), and each of those to
// its even and odd values as FP32 (a shift, a mask). The block scale (· 2^8) moves onto x, once
// per scale row of the weight: xs[j] = x[j] · scale[row block][j / block_cols] · 2^8, as the
// row-major FP8 GEMV does, so the inner loop has no multiply.
// Numerics: x · s rounds once; products exact under FMA; lane r adds row r's terms in 4 partial
// sums (pairs p mod 4) added at the end, whatever the number of rows of x (the same bits alone or
// in a batch); a NaN code widens to NaN and makes its output NaN. Include after the ISA's
// `#pragma GCC target` with AVX-512 VBMI and BF16; internal linkage.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "core/ggml_repack.h"
#include "kernels/cpu/linear_bf16_r16.h"   // kR16AheadBytes
#include "kernels/cpu/linear_driver.h"     // lin_scale_x
#include "kernels/cpu/linear_gemm_bf16.h"  // F8Widen

namespace mla::cpu {
namespace {

// acc[i] += even(bf) · xs[i][2p] + odd(bf) · xs[i][2p + 1] for one vector bf of BF16 pairs.
template <int N>
inline void f8_r16_pair(__m512 (&acc)[N], __m512i bf, const float* xs, int64_t in, int64_t p) {
  const __m512 even = _mm512_castsi512_ps(_mm512_slli_epi32(bf, 16));
  const __m512 odd = _mm512_castsi512_ps(_mm512_and_si512(bf, _mm512_set1_epi32(int(0xFFFF0000u))));
#pragma GCC unroll 4
  for (int i = 0; i < N; ++i) {
    acc[i] = _mm512_fmadd_ps(even, _mm512_set1_ps(xs[i * in + 2 * p]), acc[i]);
    acc[i] = _mm512_fmadd_ps(odd, _mm512_set1_ps(xs[i * in + 2 * p + 1]), acc[i]);
  }
}

// y[i · ldy + l] = Σ_j xs[i · in + j] · code(W[l][j]) · 2^-8 for the 16 rows of one group (at w,
// 16 · in bytes read front to back) and N rows of scaled x.
template <int N>
inline void f8_r16_seq(const F8Widen& t, const uint8_t* w, int64_t in, const float* xs, float* y,
                       int64_t ldy) {
  __m512 acc[4][N];
  for (int s = 0; s < 4; ++s)
    for (int i = 0; i < N; ++i) acc[s][i] = _mm512_setzero_ps();
  const int64_t kp = in / 2;
  int64_t p = 0;
  for (; p + 4 <= kp; p += 4) {
    for (int line = 0; line < 128; line += 64)  // see kR16AheadBytes (linear_bf16_r16.h)
      _mm_prefetch(reinterpret_cast<const char*>(w + 32 * p + line + kR16AheadBytes), _MM_HINT_NTA);
    __m512i a, b, c, d;
    t.widen(_mm512_loadu_si512(w + 32 * p), a, b);
    t.widen(_mm512_loadu_si512(w + 32 * p + 64), c, d);
    f8_r16_pair<N>(acc[0], a, xs, in, p);
    f8_r16_pair<N>(acc[1], b, xs, in, p + 1);
    f8_r16_pair<N>(acc[2], c, xs, in, p + 2);
    f8_r16_pair<N>(acc[3], d, xs, in, p + 3);
  }
  for (int s = 0; p < kp; p += 2, s += 2) {  // 1-3 pairs left: a masked load past none
    const __mmask64 m = kp - p >= 2 ? ~__mmask64(0) : __mmask64(0xFFFFFFFFu);
    __m512i a, b;
    t.widen(_mm512_maskz_loadu_epi8(m, w + 32 * p), a, b);
    f8_r16_pair<N>(acc[s], a, xs, in, p);
    if (kp - p >= 2) f8_r16_pair<N>(acc[s + 1], b, xs, in, p + 1);
  }
  for (int i = 0; i < N; ++i)
    _mm512_storeu_ps(y + i * ldy, _mm512_add_ps(_mm512_add_ps(acc[0][i], acc[1][i]),
                                                _mm512_add_ps(acc[2][i], acc[3][i])));
}

// linear_driver's chunk of a kF8E4M3R16 weight: rows [r0, r1) (whole groups of 16) against all
// n rows of x, 4 at a time, x scaled once per scale row of the rows.
inline void f8_r16_chunk(const LinearWeight& w, int64_t n, const float* x, float* y, int64_t r0,
                         int64_t r1) {
  static thread_local AlignedBuffer<float> scratch;
  const F8Widen t;
  float* xs = ensure_scratch(scratch, size_t(4 * w.in));
  for (int64_t i0 = 0; i0 < n; i0 += 4) {
    const int64_t nx = std::min<int64_t>(4, n - i0);
    const float* xg = x + i0 * w.in;
    float* yg = y + i0 * w.out;
    for (int64_t rs = r0; rs < r1;) {
      const int64_t re = std::min(r1, (rs / w.block_rows + 1) * w.block_rows);
      lin_scale_x(w, rs, nx, xg, xs);
      for (int64_t g = rs / kR16Rows; g < re / kR16Rows; ++g) {
        const uint8_t* group = w.data + g * kR16Rows * w.in;
        float* yo = yg + g * kR16Rows;
        switch (nx) {
          case 1:
            f8_r16_seq<1>(t, group, w.in, xs, yo, w.out);
            break;
          case 2:
            f8_r16_seq<2>(t, group, w.in, xs, yo, w.out);
            break;
          case 3:
            f8_r16_seq<3>(t, group, w.in, xs, yo, w.out);
            break;
          default:
            f8_r16_seq<4>(t, group, w.in, xs, yo, w.out);
            break;
        }
      }
      rs = re;
    }
  }
}

}  // namespace
}  // namespace mla::cpu
