// The int8 GEMM of the GGUF K formats Q4_K / Q5_K / Q6_K for CPUs without AVX512-VNNI (the BF16
// paths from lin_gemm_min_rows rows of x): y [n, out] = x [n, in] · Wᵀ with x quantised per 256
// values exactly as the K GEMV of linear_ggml_avx2_k.h does (its x rows, shared with it). A
// super-block's product (codes q unsigned, runs j of 32 values, or of 16 for Q6_K):
//   Q4_K / Q5_K:  d·dx · Σ_j s_j Σ q·q_x  −  dmin·dx · Σ_j m_j Σ q_x
//   Q6_K:         d·dx · Σ_j s_j (Σ q·q_x − 32 · Σ q_x)
// with both integer sums exact in int32. vpmaddubsw forms pairs q·q_x + q'·q_x' in int16 (at most
// 2 · 63 · 127 = 16,002), and because the codes are small the pairs of several quads add in
// int16 before one vpmaddwd by the run's scale: 8 quads for Q4_K (8 · 2 · 15 · 127 = 30,480), 4 for
// Q5_K (31,496), 2 for Q6_K (32,004), all below 32,767. So a quad of 8 weight rows × 4 values
// costs ~2.3 integer operations per row of x, where Q8_0's full-range codes need 4
// (linear_gemm_int8_avx2.h). The min terms take the int16 sums of x per run (the x row's
// isums32 / isums16) against the rows' m_j (32 · s_j for Q6_K) by vpmaddwd, once a super-block.
//
// Layout: a chunk of W rows is decoded once into groups of 8 rows (the int32 lanes of a ymm); per
// group and super-block: 64 vectors of quads (vector k: codes 4k .. 4k + 3 of each row), per run
// the rows' scales (int16, twice in each lane), per pair of runs the rows' (m_2p, m_2p+1) as
// int16 (Q6_K: 32 · s), then d [8] and (Q4_K / Q5_K) dmin [8] in FP32. Rows past the chunk read
// zero codes and scales.
// Rounding: per super-block the conversion of the sum (it may pass 2^24: one rounding), one
// product d·dx (and dmin·dx) and one fused add per term into the output (two for Q4_K / Q5_K):
// within the K GEMV's bound (tests: vnni_k_bound), which counts more roundings a term.
// Include after linear_ggml_avx2_k.h under the ISA's `#pragma GCC target` (avx2, fma, f16c or
// above); internal linkage.
#pragma once

#include "kernels/cpu/linear_gemm_int8_avx2.h"
#include "kernels/cpu/linear_ggml_avx2_k.h"

namespace mla::cpu {
namespace {

template <DType D>
struct A2K {
  static constexpr bool kMins = D != DType::kQ6_K;
  static constexpr int kRuns = D == DType::kQ6_K ? 16 : 8;
  static constexpr int kQuadsPerRun = 64 / kRuns;
  // Quads whose int16 pairs add before one vpmaddwd (the bounds above).
  static constexpr int kQuadsPerMadd = D == DType::kQ4_K ? 8 : D == DType::kQ5_K ? 4 : 2;
  static constexpr int64_t kScales = 64 * 32;
  static constexpr int64_t kPairs = kScales + 32 * kRuns;
  static constexpr int64_t kD = kPairs + 32 * (kRuns / 2);
  static constexpr int64_t kSbBytes = kD + (kMins ? 64 : 32);
};

// The fewest rows of x Q6_K takes the GEMM with (the hooks'; Q4_K / Q5_K: lin_gemm_min_rows).
constexpr int64_t kA2KQ6MinRows = 64;

inline bool ggml_gemm_a2k_takes(const LinearWeight& w) {
  return w.dtype == DType::kQ4_K || w.dtype == DType::kQ5_K || w.dtype == DType::kQ6_K;
}

// Panel bytes of one weight row (a group's bytes / 8).
inline int64_t ggml_gemm_a2k_row_bytes(const LinearWeight& w) {
  const int64_t sb =
      w.dtype == DType::kQ6_K ? A2K<DType::kQ6_K>::kSbBytes : A2K<DType::kQ4_K>::kSbBytes;
  return w.in / 256 * sb / kA2Rows;
}

// Rows [o0, o0 + rows) of a K-format weight into `panel` (ceil(rows / 8) groups of in/256
// super-blocks, 32-byte aligned).
template <DType D>
void ggml_a2k_pack_rows(const LinearWeight& w, int64_t o0, int64_t rows, uint8_t* panel) {
  using F = A2K<D>;
  constexpr int kBytes = kAvx2KBytes<D>;
  const int64_t sbs = w.in / 256, row_bytes = sbs * kBytes;
  alignas(32) uint8_t codes[kA2Rows][256];
  for (int64_t g0 = 0; g0 < rows; g0 += kA2Rows) {
    const int64_t live = std::min<int64_t>(kA2Rows, rows - g0);
    for (int64_t sb = 0; sb < sbs; ++sb) {
      uint8_t* out = panel + (g0 / kA2Rows * sbs + sb) * F::kSbBytes;
      alignas(32) int32_t scales[F::kRuns][kA2Rows] = {}, pairs[F::kRuns / 2][kA2Rows] = {};
      alignas(32) float d[kA2Rows] = {}, dmin[kA2Rows] = {};
      for (int64_t r = 0; r < kA2Rows; ++r) {
        if (r >= live) {
          std::memset(codes[r], 0, 256);
          continue;
        }
        const uint8_t* b = w.data + (o0 + g0 + r) * row_bytes + sb * kBytes;
        ggml_avx2_k_codes<D>(b, [&](__m256i q, int at) {
          _mm256_store_si256(reinterpret_cast<__m256i*>(codes[r] + at), q);
        });
        int32_t s[F::kRuns], m[F::kRuns];
        if constexpr (F::kMins) {
          uint8_t sc[8], mn[8];
          ggml::unpack_scale_min_k4(b + 4, sc, mn);
          for (int j = 0; j < 8; ++j) s[j] = sc[j], m[j] = mn[j];
          d[r] = ggml::load_half(b);
          dmin[r] = ggml::load_half(b + 2);
        } else {
          for (int j = 0; j < 16; ++j) s[j] = int8_t(b[192 + j]), m[j] = 32 * s[j];
          d[r] = ggml::load_half(b + 208);
        }
        const auto two = [](int32_t lo, int32_t hi) {
          return int32_t(uint32_t(uint16_t(lo)) | uint32_t(uint16_t(hi)) << 16);
        };
        for (int j = 0; j < F::kRuns; ++j) scales[j][r] = two(s[j], s[j]);
        for (int p = 0; p < F::kRuns / 2; ++p) pairs[p][r] = two(m[2 * p], m[2 * p + 1]);
      }
      for (int k = 0; k < 8; ++k) {  // 32 values of the 8 rows: 8 quads of each, transposed
        __m256 v[kA2Rows];
        for (int r = 0; r < kA2Rows; ++r)
          v[r] = _mm256_load_ps(reinterpret_cast<const float*>(codes[r] + 32 * k));
        transpose8x8_ps(v, reinterpret_cast<float*>(out + 256 * k), kA2Rows);
      }
      std::memcpy(out + F::kScales, scales, sizeof(scales));
      std::memcpy(out + F::kPairs, pairs, sizeof(pairs));
      std::memcpy(out + F::kD, d, sizeof(d));
      if constexpr (F::kMins) std::memcpy(out + F::kD + 32, dmin, sizeof(dmin));
    }
  }
}

// y[c · ldy + l] for l < lanes and the C rows of x in xs against one group of `sbs` super-blocks.
template <DType D, int C>
inline void ggml_a2k_tile(const uint8_t* group, int64_t sbs, const GgmlAvx2KXRow* xs, float* y,
                          int64_t ldy, int lanes) {
  using F = A2K<D>;
  __m256 f[C];
  for (int c = 0; c < C; ++c) f[c] = _mm256_setzero_ps();
  for (int64_t sb = 0; sb < sbs; ++sb) {
    const uint8_t* p = group + sb * F::kSbBytes;
    __m256i acc[C];
    for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_si256();
      // Unrolled whole: the int16 and int32 accumulators stay in registers only when every index
      // is a constant (GCC 12 kept them on the stack behind a loop over the quads).
#pragma GCC unroll 16
    for (int j = 0; j < F::kRuns; ++j) {
      const __m256i sc =
          _mm256_load_si256(reinterpret_cast<const __m256i*>(p + F::kScales + 32 * j));
#pragma GCC unroll 8
      for (int h = 0; h < F::kQuadsPerRun; h += F::kQuadsPerMadd) {
        __m256i t[C];
        for (int c = 0; c < C; ++c) t[c] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int q = 0; q < F::kQuadsPerMadd; ++q) {
          const int k = j * F::kQuadsPerRun + h + q;
          const __m256i wv = _mm256_load_si256(reinterpret_cast<const __m256i*>(p + 32 * k));
          for (int c = 0; c < C; ++c) {
            int32_t quad;
            std::memcpy(&quad, xs[c].codes + 256 * sb + 4 * k, 4);
            t[c] = _mm256_add_epi16(t[c], _mm256_maddubs_epi16(wv, _mm256_set1_epi32(quad)));
            __asm__("" : "+x"(t[c]));  // no reassociation into a tree on the stack (GCC 12)
          }
        }
        for (int c = 0; c < C; ++c) {
          acc[c] = _mm256_add_epi32(acc[c], _mm256_madd_epi16(t[c], sc));
          __asm__("" : "+x"(acc[c]));
        }
      }
    }
    const __m256 d = _mm256_load_ps(reinterpret_cast<const float*>(p + F::kD));
    for (int c = 0; c < C; ++c) {
      // Σ_j m_j · Σ q_x per pair of runs: the x row's int16 sums, two a broadcast.
      const int16_t* sx = F::kRuns == 16 ? xs[c].isums16 + 16 * sb : xs[c].isums32 + 8 * sb;
      __m256i ms = _mm256_setzero_si256();
      for (int pp = 0; pp < F::kRuns / 2; ++pp) {
        int32_t two;
        std::memcpy(&two, sx + 2 * pp, 4);
        ms = _mm256_add_epi32(
            ms, _mm256_madd_epi16(
                    _mm256_load_si256(reinterpret_cast<const __m256i*>(p + F::kPairs + 32 * pp)),
                    _mm256_set1_epi32(two)));
      }
      const __m256 dx = _mm256_set1_ps(xs[c].dx[sb]);
      if constexpr (F::kMins) {
        const __m256 dmin = _mm256_load_ps(reinterpret_cast<const float*>(p + F::kD + 32));
        f[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[c]), _mm256_mul_ps(d, dx), f[c]);
        f[c] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(ms), _mm256_mul_ps(dmin, dx), f[c]);
      } else {
        f[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(acc[c], ms)),
                               _mm256_mul_ps(d, dx), f[c]);
      }
    }
  }
  ggml_a2_store<C>(f, y, ldy, lanes);
}

// Rows [r0, r1) of w against all n rows of x quantised by ggml_avx2_k_quantize_x_row
// (ggml_avx2_k_x_row_bytes(in) bytes apart at xq); y: row 0 of x's outputs, w.out apart.
template <DType D>
void ggml_gemm_a2k_chunk_typed(const LinearWeight& w, int64_t n, const uint8_t* xq, float* y,
                               int64_t r0, int64_t r1) {
  const int64_t sbs = w.in / 256, stride = ggml_avx2_k_x_row_bytes(w.in);
  ggml_a2_chunk_loop<GgmlAvx2KXRow>(
      n, r1 - r0, sbs * A2K<D>::kSbBytes, y + r0, w.out,
      [&](int64_t i) { return ggml_avx2_k_x_row(xq + i * stride, w.in); },
      [&](uint8_t* panel) { ggml_a2k_pack_rows<D>(w, r0, r1 - r0, panel); },
      [&](auto C, const uint8_t* group, const GgmlAvx2KXRow* xs, float* yg, int lanes) {
        ggml_a2k_tile<D, decltype(C)::value>(group, sbs, xs, yg, w.out, lanes);
      });
}

inline void ggml_gemm_a2k_chunk(const LinearWeight& w, int64_t n, const uint8_t* xq, float* y,
                                int64_t r0, int64_t r1) {
  if (w.dtype == DType::kQ4_K) return ggml_gemm_a2k_chunk_typed<DType::kQ4_K>(w, n, xq, y, r0, r1);
  if (w.dtype == DType::kQ5_K) return ggml_gemm_a2k_chunk_typed<DType::kQ5_K>(w, n, xq, y, r0, r1);
  ggml_gemm_a2k_chunk_typed<DType::kQ6_K>(w, n, xq, y, r0, r1);
}

}  // namespace
}  // namespace mla::cpu
