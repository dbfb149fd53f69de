// The GGUF 32-value block formats (Q8_0, Q4_0; docs/GGUF.md) on AVX2 integer dot products, for
// CPUs without AVX512-VNNI: x is quantised once per product to int8 codes per 32 values
// (q = round(x / dx), dx = amax / 127, |q| ≤ 127), and a block's product is
//   d_w · dx · Σ q_w·q_x
// with the integer sum exact: vpmaddubsw multiplies |q_w| (unsigned) by q_x carrying q_w's sign
// (pairs of at most 2 · 128 · 127 = 32,512: no int16 saturation), vpmaddwd by ones sums the pairs
// into 8 int32 lanes. Every SIMD variant runs Q8_0 / Q4_0 GEMVs on this kernel, AVX-512 ones
// too: on Zen 5 it matched a 512-bit VNNI kernel (offset codes, x sums per block) at one row of
// x and read 2x faster from DRAM at 4 rows (its x rows are 1.1 bytes a value, not 3).
// Include after the ISA's `#pragma GCC target` (avx2, fma, f16c); internal linkage.
#pragma once

#include "core/dtype.h"
#include "kernels/cpu/scratch.h"

namespace mla::cpu {
namespace {

// Rows [r0, r1) of w against all n quantised rows of x (`stride` bytes apart from `xq`), in
// groups of up to 4: run(std::integral_constant<int, N>, xs, y_group) for each group, xs made
// by make(row_base). Shared by every GEMV kernel of the block formats (no intrinsics here).
template <class XRow, class Make, class Run>
void ggml_x_groups(int64_t n, const uint8_t* xq, int64_t stride, int64_t ldy, float* y, Make make,
                   Run run) {
  for (int64_t i0 = 0; i0 < n; i0 += 4) {
    XRow xs[4];
    const int64_t nx = std::min<int64_t>(4, n - i0);
    for (int64_t i = 0; i < nx; ++i) xs[i] = make(xq + (i0 + i) * stride);
    float* yg = y + i0 * ldy;
    switch (nx) {
      case 1:
        run(std::integral_constant<int, 1>{}, xs, yg);
        break;
      case 2:
        run(std::integral_constant<int, 2>{}, xs, yg);
        break;
      case 3:
        run(std::integral_constant<int, 3>{}, xs, yg);
        break;
      default:
        run(std::integral_constant<int, 4>{}, xs, yg);
    }
  }
}

// x row layout (32-byte aligned): codes [in] int8, then dx [in / 32] FP32.
constexpr int64_t ggml_avx2_x_row_bytes(int64_t in) {
  return (in + 31) / 32 * 32 + (in / 32 * 4 + 31) / 32 * 32;
}

inline float ggml_avx2_hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)));
}

inline float ggml_avx2_hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_shuffle_ps(m, m, 1)));
}

inline void ggml_avx2_quantize_x_row(const float* x, int64_t in, uint8_t* dst) {
  int8_t* codes = reinterpret_cast<int8_t*>(dst);
  float* dxs = reinterpret_cast<float*>(dst + (in + 31) / 32 * 32);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < in / 32; ++b) {
    __m256 v[4], amax = _mm256_setzero_ps();
    for (int k = 0; k < 4; ++k) {
      v[k] = _mm256_loadu_ps(x + 32 * b + 8 * k);
      amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[k]));
    }
    const float dx = ggml_avx2_hmax(amax) / 127.0f;
    dxs[b] = dx;
    const __m256 inv = _mm256_set1_ps(dx > 0.0f ? 1.0f / dx : 0.0f);
    const __m256 lim = _mm256_set1_ps(127.0f);
    __m256i q[4];
    for (int k = 0; k < 4; ++k)  // round to nearest even, clamped to ±127 (1 / dx rounds)
      q[k] = _mm256_cvtps_epi32(_mm256_max_ps(_mm256_min_ps(_mm256_mul_ps(v[k], inv), lim),
                                              _mm256_sub_ps(_mm256_setzero_ps(), lim)));
    // int32 → int16 → int8 with the lane interleaving of the packs undone.
    const __m256i w01 = _mm256_packs_epi32(q[0], q[1]), w23 = _mm256_packs_epi32(q[2], q[3]);
    const __m256i b8 = _mm256_packs_epi16(w01, w23);
    const __m256i ordered =
        _mm256_permutevar8x32_epi32(b8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_store_si256(reinterpret_cast<__m256i*>(codes + 32 * b), ordered);
  }
}

inline bool ggml_avx2_takes(DType t) {
  return t == DType::kQ8_0 || t == DType::kQ4_0;
}

// The 32 signed codes of block b of a row.
template <DType D>
inline __m256i ggml_avx2_codes(const uint8_t* blk) {
  if constexpr (D == DType::kQ8_0) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
  } else {  // byte j: value j (low nibble) and value j + 16 (high nibble), stored as q + 8
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2));
    const __m128i m4 = _mm_set1_epi8(0x0f);
    const __m256i q = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(v, m4)),
                                              _mm_and_si128(_mm_srli_epi16(v, 4), m4), 1);
    return _mm256_sub_epi8(q, _mm256_set1_epi8(8));
  }
}

// y[i · ldy + o] for rows o in [r0, r1) of w and the N ≤ 4 quantised rows at xs[i]. Each row of
// x keeps U accumulators, block b in accumulator b % U: with one chain a decode step (N = 1) waited
// on the fused add's latency every block (one Zen 3 core, weight in L3: +20-35%; from DRAM two
// cores stay at ~24-25 GB/s either way, ~13 operations a block: docs/BENCHMARKS.md "An int8 GEMM
// without VNNI").
template <DType D, int N>
void ggml_avx2_rows(const LinearWeight& w, const uint8_t* const* xs, float* y, int64_t ldy,
                    int64_t r0, int64_t r1) {
  constexpr int kBytes = D == DType::kQ8_0 ? 34 : 18;
  constexpr int U = N == 1 ? 4 : 2;
  const int64_t blocks = w.in / 32, row_bytes = blocks * kBytes;
  const float* dx[N];
  for (int i = 0; i < N; ++i) dx[i] = reinterpret_cast<const float*>(xs[i] + (w.in + 31) / 32 * 32);
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t o = r0; o < r1; ++o) {
    const uint8_t* row = w.data + o * row_bytes;
    __m256 acc[U][N];
    for (int u = 0; u < U; ++u)
      for (int i = 0; i < N; ++i) acc[u][i] = _mm256_setzero_ps();
    const auto block = [&](int64_t b, __m256(&a)[N]) {
      const uint8_t* blk = row + b * kBytes;
      uint16_t h;
      std::memcpy(&h, blk, 2);
      const float dw = _cvtsh_ss(h);
      const __m256i q = ggml_avx2_codes<D>(blk);
      const __m256i mag = _mm256_sign_epi8(q, q);
      for (int i = 0; i < N; ++i) {
        const __m256i xq = _mm256_load_si256(reinterpret_cast<const __m256i*>(xs[i] + 32 * b));
        const __m256i pairs = _mm256_maddubs_epi16(mag, _mm256_sign_epi8(xq, q));
        const __m256 dot = _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, ones));
        a[i] = _mm256_fmadd_ps(dot, _mm256_set1_ps(dw * dx[i][b]), a[i]);
      }
    };
    int64_t b = 0;
    for (; b + U <= blocks; b += U)
      for (int u = 0; u < U; ++u) block(b + u, acc[u]);
    for (; b < blocks; ++b) block(b, acc[b % U]);
    for (int i = 0; i < N; ++i) {
      __m256 t = acc[0][i];
      for (int u = 1; u < U; ++u) t = _mm256_add_ps(t, acc[u][i]);
      y[i * ldy + o] = ggml_avx2_hsum(t);
    }
  }
}

// Rows [r0, r1) of a Q8_0 / Q4_0 weight against all n quantised rows of x at xq.
template <DType D>
void ggml_avx2_chunk_typed(const LinearWeight& w, int64_t n, const uint8_t* xq, float* y,
                           int64_t r0, int64_t r1) {
  ggml_x_groups<const uint8_t*>(
      n, xq, ggml_avx2_x_row_bytes(w.in), w.out, y, [](const uint8_t* p) { return p; },
      [&](auto N, const uint8_t* const* xs, float* yg) {
        ggml_avx2_rows<D, decltype(N)::value>(w, xs, yg, w.out, r0, r1);
      });
}

inline void ggml_avx2_chunk(const LinearWeight& w, int64_t n, const uint8_t* xq, float* y,
                            int64_t r0, int64_t r1) {
  if (w.dtype == DType::kQ8_0) return ggml_avx2_chunk_typed<DType::kQ8_0>(w, n, xq, y, r0, r1);
  ggml_avx2_chunk_typed<DType::kQ4_0>(w, n, xq, y, r0, r1);
}

}  // namespace
}  // namespace mla::cpu
