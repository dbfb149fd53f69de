// The FP32 products of a kBF16R16 weight (BF16 repacked at load, core/ggml_repack.h) for the
// FP32 paths of linear_driver.h: decode (and every product below lin_gemm_min_rows rows of x on
// path kBf16; on kBf16Gemm those take the BF16 dot products of linear_r16_dot.h), and every n on
// paths kAuto / kDot. Products of more rows on those
// paths take the BF16 GEMM (linear_gemm_bf16.h), which reads the same layout.
//
// A 64-byte vector of the layout is pair p of 16 rows (row r's values 2p, 2p + 1 in lane r):
// its even values are the vector shifted left by 16 bits and its odd values the vector with the
// low halves cleared, both exact FP32. Each is multiplied by x's value broadcast and added to a
// vector of 16 row sums: no horizontal sums, and 16 outputs per accumulator.
// Numerics: products exact under FMA; lane r adds row r's terms in 4 partial sums (pairs p mod 4,
// each in column order, one rounding a term) and adds those at the end, whatever the number of
// rows of x: a row of x gets the same bits alone or in a batch (decode batching), and the bound is
// the FP32 one (a summation tree of `in` terms). Include after the ISA's `#pragma GCC target` with
// AVX-512F; internal linkage.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "core/ggml_repack.h"

namespace mla::cpu {
namespace {
// How far ahead of its loads the GEMV requests the weight (prefetchnta). Without it the loads
// waited on DRAM at every 4 KiB page (where the hardware prefetcher stops) with nothing to
// overlap: `mla_bench_linear` 2048 × 2048 from DRAM took about the L3 time plus the DRAM time
// (BF16_R16 n1 116-120 µs, n4 247-259; F8_E4M3_R16 70-79, 189-199), against 101-109 / 126-130
// and 57-59 / 83-84 with 8 KiB (4 KiB: 119 / 147-164, 63 / 99-104). On the whole 4-layer models
// (bench/model_ab.sh) FP8 decode went from 0.83 to 0.92 of the probe in the host's fast spells
// and 0.92 to 0.96 in the slow ones; BF16 0.95 to 0.98 in the slow ones.
constexpr int64_t kR16AheadBytes = 8192;
// y[i · ldy + l] = Σ_j x[i · in + j] · W[l][j] for the 16 rows of one vector (at w, in · 32
// bytes read front to back) and i < N rows of x: per pair one load, two widenings, 2N broadcasts
// and 2N FMAs into one of 4 partial sums per lane (pairs p mod 4: independent FMA chains), added
// at the end as (s0 + s1) + (s2 + s3).
template <int N>
inline void bf16_r16_seq(const uint8_t* w, int64_t in, const float* x, float* y, int64_t ldy) {
  const __m512i odd_mask = _mm512_set1_epi32(int(0xFFFF0000u));
  __m512 acc[4][N];
  for (int s = 0; s < 4; ++s)
    for (int i = 0; i < N; ++i) acc[s][i] = _mm512_setzero_ps();
  const int64_t kp = in / 2;
  int64_t p = 0;
  auto step = [&](int64_t q, int s) {
    _mm_prefetch(reinterpret_cast<const char*>(w + 64 * q + kR16AheadBytes), _MM_HINT_NTA);
    const __m512i wv = _mm512_loadu_si512(w + 64 * q);
    const __m512 even = _mm512_castsi512_ps(_mm512_slli_epi32(wv, 16));
    const __m512 odd = _mm512_castsi512_ps(_mm512_and_si512(wv, odd_mask));
#pragma GCC unroll 4
    for (int i = 0; i < N; ++i) {
      acc[s][i] = _mm512_fmadd_ps(even, _mm512_set1_ps(x[i * in + 2 * q]), acc[s][i]);
      acc[s][i] = _mm512_fmadd_ps(odd, _mm512_set1_ps(x[i * in + 2 * q + 1]), acc[s][i]);
    }
  };
  for (; p + 4 <= kp; p += 4) {
    step(p, 0);
    step(p + 1, 1);
    step(p + 2, 2);
    step(p + 3, 3);
  }
  for (int s = 0; p < kp; ++p, ++s) step(p, s);
  for (int i = 0; i < N; ++i)
    _mm512_storeu_ps(y + i * ldy, _mm512_add_ps(_mm512_add_ps(acc[0][i], acc[1][i]),
                                                _mm512_add_ps(acc[2][i], acc[3][i])));
}

// Rows [r0, r1) (multiples of 16) against N rows of x (row stride in), y row stride out: one
// vector of 16 rows at a time, so the weight is one stream read front to back. Tiles of 8
// vectors read side by side (8 streams 64 KiB apart) decoded the 4-layer BF16 model at 0.80 of
// the read probe in the host's fast spells, against 0.98-1.00 this way (bench/model_ab.sh; 0.96
// both in the slow ones; row-major BF16: 0.80-0.84 and 0.96-0.98).
template <int N>
void bf16_r16_rows(const LinearWeight& w, int64_t r0, int64_t r1, const float* x, float* y) {
  const int64_t vec_bytes = w.in * 32;
  for (int64_t v = r0 / kR16Rows; v < r1 / kR16Rows; ++v)
    bf16_r16_seq<N>(w.data + v * vec_bytes, w.in, x, y + 16 * v, w.out);
}

// linear_driver's chunk of a kBF16R16 weight: rows [r0, r1) (whole groups of 16: lin_row_unit)
// against all n rows of x, 4 at a time (for n > 4 the chunk, L2-sized, is re-read per group).
inline void bf16_r16_chunk(const LinearWeight& w, int64_t n, const float* x, float* y, int64_t r0,
                           int64_t r1) {
  for (int64_t i0 = 0; i0 < n; i0 += 4) {
    const float* xg = x + i0 * w.in;
    float* yg = y + i0 * w.out;
    switch (std::min<int64_t>(4, n - i0)) {
      case 1:
        bf16_r16_rows<1>(w, r0, r1, xg, yg);
        break;
      case 2:
        bf16_r16_rows<2>(w, r0, r1, xg, yg);
        break;
      case 3:
        bf16_r16_rows<3>(w, r0, r1, xg, yg);
        break;
      default:
        bf16_r16_rows<4>(w, r0, r1, xg, yg);
        break;
    }
  }
}

}  // namespace
}  // namespace mla::cpu
