// The FP32 products of a kBF16R16 weight (BF16 repacked at load, core/ggml_repack.h) for the
// FP32 paths of linear_driver.h: decode (and every product of up to kLinWidenMinRows rows of x on
// path kBf16), and every n on paths kAuto / kDot. Products of more rows on path kBf16 take the
// BF16 GEMM (linear_gemm_bf16.h), which reads the same layout.
//
// A 64-byte vector of the layout is pair p of 16 rows (row r's values 2p, 2p + 1 in lane r):
// its even values are the vector shifted left by 16 bits and its odd values the vector with the
// low halves cleared, both exact FP32. Each is multiplied by x's value broadcast and added to a
// vector of 16 row sums: no horizontal sums, and 16 outputs per accumulator.
// Numerics: products exact under FMA; lane r adds row r's terms in column order 0, 1, 2, ...,
// one rounding each, whatever the register tile or the number of rows of x: a row of x gets the
// same bits alone or in a batch (decode batching), and the bound is the FP32 one (a summation
// tree of `in` terms). Include after the ISA's `#pragma GCC target` with AVX-512F; internal
// linkage.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "core/ggml_repack.h"

namespace mla::cpu {
namespace {

// y[i · ldy + 16v + l] = Σ_j x[i · in + j] · W[16v + l][j] for v < V vectors of 16 rows (vector v
// at w + v · in · 32 bytes), i < N rows of x. V·N accumulators; per pair V loads, 2V widenings,
// 2N broadcasts and 2VN FMAs.
template <int V, int N>
inline void bf16_r16_tile(const uint8_t* w, int64_t in, const float* x, float* y, int64_t ldy) {
  const int64_t vec_bytes = in * 32;
  const __m512i odd_mask = _mm512_set1_epi32(int(0xFFFF0000u));
  __m512 acc[V][N];
  for (int v = 0; v < V; ++v)
    for (int i = 0; i < N; ++i) acc[v][i] = _mm512_setzero_ps();
  for (int64_t p = 0; p < in / 2; ++p) {
    __m512 even[V], odd[V];
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) {
      const __m512i wv = _mm512_loadu_si512(w + v * vec_bytes + 64 * p);
      even[v] = _mm512_castsi512_ps(_mm512_slli_epi32(wv, 16));
      odd[v] = _mm512_castsi512_ps(_mm512_and_si512(wv, odd_mask));
    }
#pragma GCC unroll 4
    for (int i = 0; i < N; ++i) {
      const __m512 x0 = _mm512_set1_ps(x[i * in + 2 * p]);
      const __m512 x1 = _mm512_set1_ps(x[i * in + 2 * p + 1]);
#pragma GCC unroll 8
      for (int v = 0; v < V; ++v) {
        acc[v][i] = _mm512_fmadd_ps(even[v], x0, acc[v][i]);
        acc[v][i] = _mm512_fmadd_ps(odd[v], x1, acc[v][i]);
      }
    }
  }
  for (int v = 0; v < V; ++v)
    for (int i = 0; i < N; ++i) _mm512_storeu_ps(y + i * ldy + 16 * v, acc[v][i]);
}

// Rows [r0, r1) (multiples of 16) against N rows of x (row stride in), y row stride ldy: register
// tiles of V vectors (8 for one row of x, fewer as more rows share the 32 registers).
template <int N>
void bf16_r16_rows(const LinearWeight& w, int64_t r0, int64_t r1, const float* x, float* y) {
  constexpr int V = N == 1 ? 8 : N == 2 ? 4 : 2;
  const int64_t vec_bytes = w.in * 32;
  int64_t v = r0 / kR16Rows;
  const int64_t v1 = r1 / kR16Rows;
  for (; v + V <= v1; v += V)
    bf16_r16_tile<V, N>(w.data + v * vec_bytes, w.in, x, y + 16 * v, w.out);
  for (; v < v1; ++v) bf16_r16_tile<1, N>(w.data + v * vec_bytes, w.in, x, y + 16 * v, w.out);
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
