// Products of 1-4 rows of x with a kBF16R16 or kF8E4M3R16 weight on BF16 dot products, for
// path kBf16Gemm below the GEMM's minimum rows (a prefill chunk's experts with 1-3 / 1-4 tokens):
// the weight is one stream read front to back as the FP32 products of linear_bf16_r16.h /
// linear_f8_r16.h read it, but each vector of BF16 pairs (16 rows × one pair of columns; FP8
// widened by F8Widen, value · 2^-8 exact) goes straight into one vdpbf16ps per row of x against
// that row's pair of columns broadcast: N dot products per 32 weights where the FP32 products take
// 2N FMAs, a shift and a mask. On Zen 4 (2 threads, `mla_bench_linear` rows `/bf16` against the
// FP32 products of the `/dot` rows) FP8 at 1-4 rows ran 1.35-1.55x faster from L3 and 1.0-1.3x
// from DRAM (with the host's bandwidth): the FP32 products had been bound by their instructions,
// not by the reads (docs/BENCHMARKS.md "An expert's 1-4 tokens on BF16 dot products").
// Numerics: x (FP8: x · block scale · 2^8, as linear_f8_r16.h scales it) rounded to BF16 once
// (relative error 2^-9 a term, the BF16 GEMM's bound); products exact, FP32 accumulation; lane r
// adds its terms in 4 partial sums (pairs p mod 4) added at the end, whatever N (a row gets the
// same bits among 1-4 rows); a NaN code widens to NaN. Include after the ISA's `#pragma GCC
// target` with AVX-512 VBMI and BF16; internal linkage.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "core/ggml_repack.h"
#include "kernels/cpu/linear_bf16_r16.h"   // kR16AheadBytes
#include "kernels/cpu/linear_driver.h"     // lin_scale_x, kLinGroup
#include "kernels/cpu/linear_gemm_bf16.h"  // F8Widen, bf16_pairs
#include "kernels/cpu/scratch.h"

namespace mla::cpu {
namespace {

// y[i · ldy + l] = Σ_p dot(pair p of row l, xb[i · kp + p]) for the 16 rows of one group (at w,
// read front to back: 64 bytes a pair for BF16, 64 bytes two pairs for FP8) and N ≤ 4 rows of
// x as BF16 pairs (kp = in / 2 a row).
template <DType D, int N>
inline void r16_dot_seq(const F8Widen& t, const uint8_t* w, int64_t kp, const uint32_t* xb,
                        float* y, int64_t ldy) {
  constexpr int64_t kPairBytes = D == DType::kF8E4M3R16 ? 32 : 64;
  __m512 acc[4][N];
  for (int s = 0; s < 4; ++s)
    for (int i = 0; i < N; ++i) acc[s][i] = _mm512_setzero_ps();
  auto dot = [&](int s, __m512i bf, int64_t p) {
#pragma GCC unroll 4
    for (int i = 0; i < N; ++i)
      acc[s][i] = _mm512_dpbf16_ps(acc[s][i], (__m512bh)bf,
                                   (__m512bh)_mm512_set1_epi32(int(xb[i * kp + p])));
  };
  // Pairs p .. p + 3 (FP8: two 64-byte loads, BF16: four), then a tail of 1-3 pairs (FP8: a
  // masked load past none). Constant partial-sum indices keep acc in registers.
  int64_t p = 0;
  for (; p + 4 <= kp; p += 4) {
    const uint8_t* at = w + kPairBytes * p;
    for (int64_t line = 0; line < 4 * kPairBytes; line += 64)  // kR16AheadBytes: why
      _mm_prefetch(reinterpret_cast<const char*>(at + line + kR16AheadBytes), _MM_HINT_NTA);
    __m512i a, b, c, d;
    if constexpr (D == DType::kF8E4M3R16) {
      t.widen(_mm512_loadu_si512(at), a, b);
      t.widen(_mm512_loadu_si512(at + 64), c, d);
    } else {
      a = _mm512_loadu_si512(at);
      b = _mm512_loadu_si512(at + 64);
      c = _mm512_loadu_si512(at + 128);
      d = _mm512_loadu_si512(at + 192);
    }
    dot(0, a, p);
    dot(1, b, p + 1);
    dot(2, c, p + 2);
    dot(3, d, p + 3);
  }
  if (const int64_t left = kp - p; left > 0) {
    const uint8_t* at = w + kPairBytes * p;
    __m512i a, b, c = _mm512_setzero_si512(), d;
    if constexpr (D == DType::kF8E4M3R16) {
      t.widen(_mm512_maskz_loadu_epi8(left >= 2 ? ~__mmask64(0) : __mmask64(0xFFFFFFFFu), at), a,
              b);
      if (left == 3) t.widen(_mm512_maskz_loadu_epi8(__mmask64(0xFFFFFFFFu), at + 64), c, d);
    } else {
      a = _mm512_loadu_si512(at);
      b = left >= 2 ? _mm512_loadu_si512(at + 64) : a;
      if (left == 3) c = _mm512_loadu_si512(at + 128);
    }
    dot(0, a, p);
    if (left >= 2) dot(1, b, p + 1);
    if (left == 3) dot(2, c, p + 2);
  }
  for (int i = 0; i < N; ++i)
    _mm512_storeu_ps(y + i * ldy, _mm512_add_ps(_mm512_add_ps(acc[0][i], acc[1][i]),
                                                _mm512_add_ps(acc[2][i], acc[3][i])));
}

template <DType D>
inline void r16_dot_groups(const F8Widen& t, const uint8_t* data, int64_t in, int64_t nx,
                           const uint32_t* xb, float* y, int64_t ldy, int64_t g0, int64_t g1) {
  const int64_t group_bytes = kR16Rows * in * (D == DType::kF8E4M3R16 ? 1 : 2);
  for (int64_t g = g0; g < g1; ++g) {
    const uint8_t* w = data + g * group_bytes;
    float* yo = y + g * kR16Rows;
    switch (nx) {
      case 1:
        r16_dot_seq<D, 1>(t, w, in / 2, xb, yo, ldy);
        break;
      case 2:
        r16_dot_seq<D, 2>(t, w, in / 2, xb, yo, ldy);
        break;
      case 3:
        r16_dot_seq<D, 3>(t, w, in / 2, xb, yo, ldy);
        break;
      default:
        r16_dot_seq<D, 4>(t, w, in / 2, xb, yo, ldy);
        break;
    }
  }
}

// linear_driver's chunk of a kBF16R16 or kF8E4M3R16 weight on BF16 dot products: rows [r0, r1)
// (whole groups of 16) against all n rows of x, 4 at a time; FP8's x scaled per scale row.
inline void r16_dot_chunk(const LinearWeight& w, int64_t n, const float* x, float* y, int64_t r0,
                          int64_t r1) {
  static thread_local AlignedBuffer<float> scaled;
  static thread_local AlignedBuffer<uint32_t> pairs;
  const F8Widen t;
  const bool fp8 = w.dtype == DType::kF8E4M3R16;
  uint32_t* xb = ensure_scratch(pairs, size_t(kLinGroup * w.in / 2));
  float* xs = fp8 ? ensure_scratch(scaled, size_t(kLinGroup * w.in)) : nullptr;
  for (int64_t i0 = 0; i0 < n; i0 += kLinGroup) {
    const int64_t nx = std::min<int64_t>(kLinGroup, n - i0);
    const float* xg = x + i0 * w.in;
    float* yg = y + i0 * w.out;
    if (!fp8) {
      bf16_pairs(xg, nx * w.in, xb);
      r16_dot_groups<DType::kBF16R16>(t, w.data, w.in, nx, xb, yg, w.out, r0 / kR16Rows,
                                      r1 / kR16Rows);
      continue;
    }
    for (int64_t rs = r0; rs < r1;) {  // one scale row of the weight at a time
      const int64_t re = std::min(r1, (rs / w.block_rows + 1) * w.block_rows);
      lin_scale_x(w, rs, nx, xg, xs);
      bf16_pairs(xs, nx * w.in, xb);
      r16_dot_groups<DType::kF8E4M3R16>(t, w.data, w.in, nx, xb, yg, w.out, rs / kR16Rows,
                                        re / kR16Rows);
      rs = re;
    }
  }
}

}  // namespace
}  // namespace mla::cpu
