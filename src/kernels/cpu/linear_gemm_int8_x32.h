// The int8 GEMM of the block formats with one scale per 32 values and no mins (Q8_0, Q4_0 and
// Q8_0_R16; the BF16 paths from lin_gemm_min_rows rows of x on AVX512-VNNI): y [n, out] = x [n, in]
// · Wᵀ on vpdpbusd, with x quantised per 32 values as the GEMV (and llama.cpp's Q8_0 products) do.
//
// W is read in the Q8_0_R16 layout (core/ggml_repack.h): groups of 16 rows, units of two blocks,
// each block 8 vectors of quads (vector q: codes 4q .. 4q + 3 of the 16 rows, one int32 lane a
// row, stored as c + 128) after the units' f16 scales. A Q8_0_R16 weight is read where it lies
// (no per-chunk copy: the copy had been 12% of an FP8-as-Q8_0 prefill, its reads from DRAM
// included); Q8_0 and Q4_0 rows are laid out so per chunk (Q4_0's codes nibble − 8 as Q8_0 codes).
//
// The stored codes u = c + 128 are vpdpbusd's unsigned operand and x's signed codes q_x its
// signed one; each run's int32 sum starts at −128 · Σ q_x (made with x), so it ends at Σ c · q_x,
// exact (|Σ| ≤ 32 · 128 · 127 < 2^24, so its conversion is exact too). The run's term
//   a · dx · Σ c · q_x     (a: the weight row's f16 scale, dx: x's per 32)
// takes one FP32 product (· a) and one fused add (· dx, into the output): with the conversion 3
// FP operations per 8 vpdpbusd, which bound the kernel at ~8 / 11 of the vpdpbusd peak.
// Error against the exact product: x's rounding, at most dx/2 per value, times Σ|w|, and 2
// roundings per run on terms of at most Σ|w|·(|x| + dx/2) (tests: i8_gemm32_bound).
// Include after linear_gemm_int8.h under the ISA's `#pragma GCC target` (avx512f/bw/vl/vnni, f16c);
// internal linkage.
#pragma once

#include "core/ggml_repack.h"
#include "kernels/cpu/linear_gemm_int8.h"
#include "kernels/cpu/weight_ahead.h"

namespace mla::cpu {
namespace {

// Values of a row as the kernel reads it: whole units of 64 (zero codes and scales past `in`).
constexpr int64_t ggml_i8x32_padded(int64_t in) {
  return (in + 63) / 64 * 64;
}

// x row layout (64-byte aligned), p = ggml_i8x32_padded(in): q [p] (int8), then per run of 32
// dx [p / 32] (FP32) and −128 · Σ q [p / 32] (int32).
constexpr int64_t ggml_i8x32_row_bytes(int64_t in) {
  const int64_t p = ggml_i8x32_padded(in);
  return p + (p / 32 * 8 + 63) / 64 * 64;
}

struct I8x32Row {
  const int8_t* q;
  const float* dx;
  const int32_t* neg_sum;
};

inline I8x32Row ggml_i8x32_row(const uint8_t* base, int64_t in) {
  const int64_t p = ggml_i8x32_padded(in);
  const float* dx = reinterpret_cast<const float*>(base + p);
  return {reinterpret_cast<const int8_t*>(base), dx, reinterpret_cast<const int32_t*>(dx + p / 32)};
}

// x [n] (n a multiple of 16) quantised per 32 values: dx = amax / 127, q = round(x / dx) to
// nearest even; past n zero codes and dx 0.
inline void ggml_i8x32_quantize_row(const float* x, int64_t n, uint8_t* dst) {
  const int64_t p = ggml_i8x32_padded(n);
  float* dxs = reinterpret_cast<float*>(dst + p);
  int32_t* neg = reinterpret_cast<int32_t*>(dxs + p / 32);
  for (int64_t b = 0; b < p / 32; ++b) {
    const __m512 v0 = 32 * b < n ? _mm512_loadu_ps(x + 32 * b) : _mm512_setzero_ps();
    const __m512 v1 = 32 * b + 16 < n ? _mm512_loadu_ps(x + 32 * b + 16) : _mm512_setzero_ps();
    const float dx =
        _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1))) / 127.0f;
    const __m512 inv = _mm512_set1_ps(dx > 0.0f ? 1.0f / dx : 0.0f);
    dxs[b] = dx;
    // The saturating narrowing keeps |q| ≤ 127 (1 / dx rounds).
    const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, inv));
    const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, inv));
    const __m128i c0 = _mm512_cvtsepi32_epi8(q0), c1 = _mm512_cvtsepi32_epi8(q1);
    _mm_store_si128(reinterpret_cast<__m128i*>(dst + 32 * b), c0);
    _mm_store_si128(reinterpret_cast<__m128i*>(dst + 32 * b + 16), c1);
    neg[b] = -128 * _mm512_reduce_add_epi32(
                        _mm512_add_epi32(_mm512_cvtepi8_epi32(c0), _mm512_cvtepi8_epi32(c1)));
  }
}

// Rows [o0, o0 + rows) of a Q8_0 or Q4_0 weight into `panel` in the Q8_0_R16 layout with units
// over ggml_i8x32_padded(in) values (rows past the end and values past `in`: zero codes and
// scales).
template <DType D>
void ggml_i8x32_pack_rows(const LinearWeight& w, int64_t o0, int64_t rows, uint8_t* panel) {
  const int64_t in = ggml_i8x32_padded(w.in), runs = in / 32, units = in / 64;
  const __m512i runs_idx = ggml_i8_runs_index(runs);
  for (int64_t s0 = 0; s0 < rows; s0 += kR16Rows) {
    // One group decoded row by row (the decoder's m stays 0 for these formats).
    const auto [codes, a, m] =
        ggml_i8_decode_rows<D>(w, o0 + s0, std::min<int64_t>(kR16Rows, rows - s0), in, runs);
    uint8_t* group = panel + (s0 / kR16Rows) * units * kR16UnitBytes;
    for (int64_t u = 0; u < units; ++u) {
      uint8_t* unit = group + u * kR16UnitBytes;
      for (int h = 0; h < 2; ++h)  // the f16 scales came from f16: exact back
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(unit + 32 * h),
                            _mm512_cvtps_ph(_mm512_i32gather_ps(runs_idx, a + 2 * u + h, 4),
                                            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      // The unit's 16 quads of every row by a 16 x 16 transpose of int32; quad k of the unit is
      // quad k % 8 of block 2u + k / 8, at 64 + 64k either way.
      __m512i v[16];
      for (int r = 0; r < 16; ++r) v[r] = _mm512_loadu_si512(codes + r * in + 64 * u);
      transpose_16x16_epi32(v);
      for (int k = 0; k < 16; ++k)
        _mm512_storeu_si512(unit + 64 + 64 * k,
                            _mm512_xor_si512(v[k], _mm512_set1_epi8(char(0x80))));
    }
  }
}

// How far ahead a register tile of the first rows of x requests a Q8_0_R16 weight read in place
// (the hardware prefetcher stops at each 4 KiB page; see gemm_widen_fp8_run).
constexpr int64_t kI8x32AheadBytes = 8192;

// y rows [0, C) (ldy apart) of S adjacent groups' outputs (group j at g0 + j · gstride, its
// outputs at y + 16·j, the last group's `lanes` wide) against C rows of x: the register tile.
// Each broadcast x quad feeds S groups (2 × 6 measured 7% faster than one group × 8 rows, with
// half the x loads per vpdpbusd). `ahead`: request the groups' bytes
// kI8x32AheadBytes on (the first tile over a weight read in place). `next` (or null): the next
// chunk's weight, `per` lines of it requested per unit.
template <int C, int S>
inline void ggml_i8x32_tile(const uint8_t* g0, int64_t gstride, int64_t units, const I8x32Row* xs,
                            float* y, int64_t ldy, int lanes, bool ahead, WeightAhead* next,
                            int64_t per) {
  __m512 f[S][C];
  for (int j = 0; j < S; ++j)
    for (int c = 0; c < C; ++c) f[j][c] = _mm512_setzero_ps();
  for (int64_t u = 0; u < units; ++u) {
    const uint8_t* unit = g0 + u * kR16UnitBytes;
    if (ahead)
      for (int j = 0; j < S; ++j)
        for (int l = 0; l < kR16UnitBytes; l += 64)
          _mm_prefetch(reinterpret_cast<const char*>(unit + j * gstride + kI8x32AheadBytes + l),
                       _MM_HINT_T0);
    if (next) next->request(per);
    for (int h = 0; h < 2; ++h) {
      const int64_t b = 2 * u + h;  // the run
      __m512i acc[S][C];
      for (int c = 0; c < C; ++c) {
        const __m512i start = _mm512_set1_epi32(xs[c].neg_sum[b]);
        for (int j = 0; j < S; ++j) acc[j][c] = start;
      }
      for (int q = 0; q < 8; ++q) {
        __m512i wv[S];
        for (int j = 0; j < S; ++j)
          wv[j] = _mm512_loadu_si512(unit + j * gstride + 64 + 512 * h + 64 * q);
        for (int c = 0; c < C; ++c) {
          int32_t quad;
          std::memcpy(&quad, xs[c].q + 32 * b + 4 * q, 4);
          const __m512i xq = _mm512_set1_epi32(quad);
          for (int j = 0; j < S; ++j) acc[j][c] = _mm512_dpbusd_epi32(acc[j][c], wv[j], xq);
        }
      }
      for (int j = 0; j < S; ++j) {
        const __m512 a = _mm512_cvtph_ps(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(unit + j * gstride + 32 * h)));
        for (int c = 0; c < C; ++c)
          f[j][c] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(acc[j][c]), a),
                                    _mm512_set1_ps(xs[c].dx[b]), f[j][c]);
      }
    }
  }
  for (int j = 0; j < S; ++j) {
    const int l = j == S - 1 ? lanes : 16;
    const __mmask16 mask = __mmask16(l >= 16 ? 0xFFFF : (1u << l) - 1);
    for (int c = 0; c < C; ++c) _mm512_mask_storeu_ps(y + c * ldy + 16 * j, mask, f[j][c]);
  }
}

constexpr int kI8x32Rows = 6;    // rows of x per register tile
constexpr int kI8x32Groups = 2;  // groups of 16 W rows per register tile

template <int C>
void ggml_i8x32_tiles(const uint8_t* g0, int64_t gstride, int64_t groups, int64_t units,
                      const I8x32Row* xs, float* y, int64_t ldy, int64_t rows, bool ahead,
                      WeightAhead* next, int64_t per) {
  constexpr int S = kI8x32Groups;
  int64_t s = 0;
  for (; s + S <= groups; s += S)
    ggml_i8x32_tile<C, S>(g0 + s * gstride, gstride, units, xs, y + s * kR16Rows, ldy,
                          int(std::min<int64_t>(kR16Rows, rows - (s + S - 1) * kR16Rows)), ahead,
                          next, per);
  for (; s < groups; ++s)
    ggml_i8x32_tile<C, 1>(g0 + s * gstride, gstride, units, xs, y + s * kR16Rows, ldy,
                          int(std::min<int64_t>(kR16Rows, rows - s * kR16Rows)), ahead, next, per);
}

// Rows [r0, r1) of w (Q8_0, Q4_0, or Q8_0_R16 with r0 a multiple of 16) against all n quantised
// rows of x (ggml_i8x32_row_bytes(in) bytes apart). The tiles after the first row tile of x
// request `next`.
template <DType D>
void ggml_gemm_i8x32_chunk_typed(const LinearWeight& w, int64_t n, const uint8_t* xq, float* y,
                                 int64_t r0, int64_t r1, WeightAhead next) {
  static thread_local AlignedBuffer<uint8_t> scratch;
  const int64_t rows = r1 - r0, groups = (rows + kR16Rows - 1) / kR16Rows;
  const int64_t units = ggml_i8x32_padded(w.in) / 64;
  const uint8_t* g0;
  int64_t gstride;
  const bool in_place = D == DType::kQ8_0R16;
  if (in_place) {
    gstride = kR16Rows * dtype_bytes(DType::kQ8_0, w.in);
    g0 = w.data + (r0 / kR16Rows) * gstride;
  } else {
    gstride = units * kR16UnitBytes;
    uint8_t* panel = ensure_scratch(scratch, size_t(groups * gstride));
    ggml_i8x32_pack_rows<D>(w, r0, rows, panel);
    g0 = panel;
  }
  const int64_t stride = ggml_i8x32_row_bytes(w.in);
  const int64_t tiles = (n + kI8x32Rows - 1) / kI8x32Rows;
  const int64_t per =
      next.per_step((tiles - 1) * ((groups + kI8x32Groups - 1) / kI8x32Groups) * units);
  for (int64_t i0 = 0; i0 < n; i0 += kI8x32Rows) {
    I8x32Row xs[kI8x32Rows];
    const int64_t nx = std::min<int64_t>(kI8x32Rows, n - i0);
    for (int64_t i = 0; i < nx; ++i) xs[i] = ggml_i8x32_row(xq + (i0 + i) * stride, w.in);
    float* yg = y + i0 * w.out + r0;
    const bool ahead = in_place && i0 == 0;
    [&]<int... I>(std::integer_sequence<int, I...>) {
      ((nx == I + 1 ? ggml_i8x32_tiles<I + 1>(g0, gstride, groups, units, xs, yg, w.out, rows,
                                              ahead, i0 > 0 ? &next : nullptr, per)
                    : void()),
       ...);
    }
    (std::make_integer_sequence<int, kI8x32Rows>{});
  }
}

inline void ggml_gemm_i8x32_chunk(const LinearWeight& w, int64_t n, const uint8_t* xq, float* y,
                                  int64_t r0, int64_t r1, WeightAhead next) {
  switch (w.dtype) {
    case DType::kQ8_0R16:
      return ggml_gemm_i8x32_chunk_typed<DType::kQ8_0R16>(w, n, xq, y, r0, r1, next);
    case DType::kQ4_0:
      return ggml_gemm_i8x32_chunk_typed<DType::kQ4_0>(w, n, xq, y, r0, r1, next);
    default:
      return ggml_gemm_i8x32_chunk_typed<DType::kQ8_0>(w, n, xq, y, r0, r1, next);
  }
}

}  // namespace
}  // namespace mla::cpu
