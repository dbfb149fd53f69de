// The GEMV of Q8_0 weights repacked at load (DType::kQ8_0R16, core/ggml_repack.h) on
// AVX512-VNNI: one 64-byte load holds 4 codes of each of 16 rows, one int32 lane a row, so
// vpdpbusd with 4 codes of x broadcast adds 64 products into 16 row sums, and a group of 16 rows
// ends with its 16 outputs in one vector (no horizontal sums, a quarter of the instructions of
// the row-at-a-time kernel of linear_ggml_avx2.h).
//
// x is quantised per 32 values as for the Q8_0 GEMV (q_x = round(x / dx), dx = amax / 127,
// |q_x| ≤ 127) and enters vpdpbusd's signed operand; the weights' stored codes u = q_w + 128 its
// unsigned one, so a block's integer sum is
//   Σ u·q_x = Σ q_w·q_x + 128 · Σ q_x
// and 128 · Σ q_x, made with x, is taken off in int32 (every sum is exact: |Σ u·q_x| ≤ 32 · 255 ·
// 127). Per block and row then one FP32 product d_w · dx and one fused add, as the Q8_0 GEMV:
// the same error bound (tests/common/linear_ggml_bounds.h).
// Include after the ISA's `#pragma GCC target` with avx512vnni; internal linkage.
#pragma once

#include "core/ggml_repack.h"
#include "kernels/cpu/linear_ggml_avx2.h"

namespace mla::cpu {
namespace {

// x row layout (64-byte aligned): as linear_ggml_avx2.h (codes [in] int8, dx [in / 32] FP32),
// then −128 · Σ q_x per block [in / 32] int32.
constexpr int64_t ggml_r16_x_row_bytes(int64_t in) {
  return (ggml_avx2_x_row_bytes(in) + in / 32 * 4 + 63) / 64 * 64;
}

struct GgmlR16XRow {
  const int8_t* q;
  const float* dx;
  const int32_t* neg_sums;
};

inline GgmlR16XRow ggml_r16_x_row(const uint8_t* base, int64_t in) {
  return {reinterpret_cast<const int8_t*>(base),
          reinterpret_cast<const float*>(base + (in + 31) / 32 * 32),
          reinterpret_cast<const int32_t*>(base + ggml_avx2_x_row_bytes(in))};
}

inline void ggml_r16_quantize_x_row(const float* x, int64_t in, uint8_t* dst) {
  ggml_avx2_quantize_x_row(x, in, dst);
  const GgmlR16XRow r = ggml_r16_x_row(dst, in);
  int32_t* sums = const_cast<int32_t*>(r.neg_sums);  // dst's own bytes
  for (int64_t b = 0; b < in / 32; ++b) {
    const __m512i q =
        _mm512_cvtepi8_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(r.q + 32 * b)));
    sums[b] = -128 * _mm512_reduce_add_epi32(_mm512_madd_epi16(q, _mm512_set1_epi16(1)));
  }
}

// The 16 outputs of one group of rows for C ≤ 4 rows of x: y[c · ldy + lane] for the lanes in
// `keep`.
template <int C>
inline void ggml_r16_group(const uint8_t* group, int64_t in, const GgmlR16XRow* xs, float* y,
                           int64_t ldy, __mmask16 keep) {
  __m512 f[C];
  for (int c = 0; c < C; ++c) f[c] = _mm512_setzero_ps();
  for (int64_t u = 0; u < in / kR16UnitValues; ++u) {
    const uint8_t* unit = group + u * kR16UnitBytes;
    for (int half = 0; half < 2; ++half) {
      const int64_t b = 2 * u + half;  // the Q8_0 block of x
      const __m512 dw =
          _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(unit + 32 * half)));
      const uint8_t* quads = unit + 64 + 512 * half;
      // Two sums per row of x (even and odd quads): two dependency chains of 4, not one of 8.
      __m512i even[C], odd[C];
      for (int c = 0; c < C; ++c) even[c] = odd[c] = _mm512_setzero_si512();
      for (int q = 0; q < 8; q += 2) {
        const __m512i w0 = _mm512_loadu_si512(quads + 64 * q);
        const __m512i w1 = _mm512_loadu_si512(quads + 64 * q + 64);
        for (int c = 0; c < C; ++c) {
          int32_t x0, x1;
          std::memcpy(&x0, xs[c].q + 32 * b + 4 * q, 4);
          std::memcpy(&x1, xs[c].q + 32 * b + 4 * q + 4, 4);
          even[c] = _mm512_dpbusd_epi32(even[c], w0, _mm512_set1_epi32(x0));
          odd[c] = _mm512_dpbusd_epi32(odd[c], w1, _mm512_set1_epi32(x1));
        }
      }
      for (int c = 0; c < C; ++c) {
        const __m512i s = _mm512_add_epi32(_mm512_add_epi32(even[c], odd[c]),
                                           _mm512_set1_epi32(xs[c].neg_sums[b]));
        f[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s),
                               _mm512_mul_ps(dw, _mm512_set1_ps(xs[c].dx[b])), f[c]);
      }
    }
  }
  for (int c = 0; c < C; ++c) _mm512_mask_storeu_ps(y + c * ldy, keep, f[c]);
}

// f(g, keep) for every group g of 16 rows that [r0, r1) meets, `keep` its lanes inside [r0, r1).
template <class F>
inline void ggml_r16_for_groups(int64_t r0, int64_t r1, F&& f) {
  for (int64_t g = r0 / kR16Rows; g * kR16Rows < r1; ++g) {
    const int64_t lo = std::max<int64_t>(0, r0 - g * kR16Rows);
    const int64_t hi = std::min<int64_t>(kR16Rows, r1 - g * kR16Rows);
    f(g, __mmask16(((1u << hi) - 1) & ~((1u << lo) - 1)));
  }
}

// Rows [r0, r1) of a kQ8_0R16 weight against all n quantised rows of x at xq: whole groups of
// 16, the lanes outside [r0, r1) computed and not stored (the driver cuts chunks at multiples
// of 16, so only a caller that does not pays for them).
inline void ggml_r16_chunk(const LinearWeight& w, int64_t n, const uint8_t* xq, float* y,
                           int64_t r0, int64_t r1) {
  const int64_t group_bytes = kR16Rows * dtype_bytes(DType::kQ8_0, w.in);
  ggml_x_groups<GgmlR16XRow>(
      n, xq, ggml_r16_x_row_bytes(w.in), w.out, y,
      [&](const uint8_t* p) { return ggml_r16_x_row(p, w.in); },
      [&](auto N, const GgmlR16XRow* xs, float* yg) {
        ggml_r16_for_groups(r0, r1, [&](int64_t g, __mmask16 keep) {
          ggml_r16_group<decltype(N)::value>(w.data + g * group_bytes, w.in, xs, yg + g * kR16Rows,
                                             w.out, keep);
        });
      });
}

}  // namespace
}  // namespace mla::cpu
