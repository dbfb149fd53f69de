// The GEMV of Q4_K weights repacked at load (DType::kQ4_KR16, core/ggml_repack.h) on
// AVX512-VNNI, as linear_ggml_r16.h does for Q8_0: one 64-byte load holds 4 code bytes (8 codes)
// of each of 16 rows, one int32 lane a row, so vpdpbusd with 4 codes of x broadcast adds 64
// products into 16 row sums, and a group of 16 rows ends with its 16 outputs in one vector. The
// row-at-a-time K kernel (linear_ggml_vnni_k.h) spends most of its instructions per super-block
// on a row's scales and a horizontal sum; here they are spread over 16 rows.
//
// x is quantised per 256-value super-block as for the K GEMV (q_x = round(x / dx), dx = amax /
// 127), with the integer sums S_j of its codes per 32-value sub-block, kept as int16 pairs. Per
// super-block and row, value = d · s_j · q − dmin · m_j (q the 4-bit code), so
//   product = fl(d·dx) · Σ_j s_j · Σ_(sub-block j) q·q_x  −  fl(dmin·dx) · Σ_j m_j · S_j
// The first sum is int32 (vpdpbusd per sub-block, then the 6-bit s_j by vpmulld: at most
// 8 · 63 · 32 · 15 · 128 < 2^31, converted to FP32 with one rounding past 2^24); the second is
// exact (vpdpwssd of the pairs (m_a, m_b) · (S_a, S_b): at most 8 · 63 · 4,096 < 2^24). Per
// super-block then two products and two fused adds into two accumulators, and one subtraction at
// the end: within the K GEMV's bound (tests/common/linear_ggml_bounds.h, vnni_k_bound).
// Include after the ISA's `#pragma GCC target` with avx512vnni; internal linkage.
#pragma once

#include "core/ggml_repack.h"
#include "kernels/cpu/linear_ggml_r16.h"  // ggml_r16_for_groups
#include "kernels/cpu/linear_ggml_vnni_k.h"

namespace mla::cpu {
namespace {

// x row layout (64-byte aligned): the K GEMV's (codes, sums, dx: linear_ggml_vnni_k.h), then per
// super-block four int32 words of int16 pairs (S0, S2), (S1, S3), (S4, S6), (S5, S7).
constexpr int64_t ggml_r16k_x_row_bytes(int64_t in) {
  return ggml_k_x_row_bytes(in) + (in / 256 * 16 + 63) / 64 * 64;
}

struct GgmlR16KXRow {
  const int8_t* codes;
  const float* dx;
  const int32_t* pairs;
};

inline GgmlR16KXRow ggml_r16k_x_row(const uint8_t* base, int64_t in) {
  const GgmlKXRow k = ggml_k_x_row(base, in);
  return {k.codes, k.dx, reinterpret_cast<const int32_t*>(base + ggml_k_x_row_bytes(in))};
}

inline void ggml_r16k_quantize_x_row(const float* x, int64_t in, uint8_t* dst) {
  ggml_k_quantize_x_row(x, in, dst);
  const GgmlR16KXRow r = ggml_r16k_x_row(dst, in);
  int32_t* pairs = const_cast<int32_t*>(r.pairs);  // dst's own bytes
  for (int64_t sb = 0; sb < in / 256; ++sb) {
    int32_t s[8];
    for (int j = 0; j < 8; ++j)
      s[j] = _mm512_reduce_add_epi32(_mm512_cvtepi8_epi32(
                 _mm_load_si128(reinterpret_cast<const __m128i*>(r.codes + 256 * sb + 32 * j)))) +
             _mm512_reduce_add_epi32(_mm512_cvtepi8_epi32(_mm_load_si128(
                 reinterpret_cast<const __m128i*>(r.codes + 256 * sb + 32 * j + 16))));
    const auto pair = [](int32_t lo, int32_t hi) {
      return int32_t(uint32_t(uint16_t(int16_t(lo))) | (uint32_t(uint16_t(int16_t(hi))) << 16));
    };
    pairs[4 * sb + 0] = pair(s[0], s[2]);
    pairs[4 * sb + 1] = pair(s[1], s[3]);
    pairs[4 * sb + 2] = pair(s[4], s[6]);
    pairs[4 * sb + 3] = pair(s[5], s[7]);
  }
}

// The 6-bit scales and mins of a Q4_K_R16 super-block unit's 16 rows, unpacked as Q4_K packs
// them: s_j / m_j for j < 4 are the low 6 bits of byte j of b0 / b1 (the unit's scale bytes 0-3 /
// 4-7 of each row); for j ≥ 4 the nibbles of byte j − 4 of b2 (bytes 8-11) with the top 2 bits
// of byte j − 4 of b0 / b1 above them. Byte j % 4 of each lane of sc03 / sc47 (m03 / m47) is
// s_j (m_j).
struct R16KScales {
  __m512i sc03, m03, sc47, m47;
};

inline R16KScales ggml_r16k_scales(const uint8_t* unit) {
  const __m512i b0 = _mm512_loadu_si512(unit + 64), b1 = _mm512_loadu_si512(unit + 128),
                b2 = _mm512_loadu_si512(unit + 192);
  const __m512i lo6 = _mm512_set1_epi32(0x3f3f3f3f), lo4 = _mm512_set1_epi32(0x0f0f0f0f),
                lo2 = _mm512_set1_epi32(0x03030303);
  return {_mm512_and_si512(b0, lo6), _mm512_and_si512(b1, lo6),
          _mm512_or_si512(_mm512_and_si512(b2, lo4),
                          _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(b0, 6), lo2), 4)),
          _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(b2, 4), lo4),
                          _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(b1, 6), lo2), 4))};
}

// The 16 outputs of one group of rows for C ≤ 4 rows of x: y[c · ldy + lane] for the lanes in
// `keep`.
template <int C>
inline void ggml_r16k_group(const uint8_t* group, int64_t in, const GgmlR16KXRow* xs, float* y,
                            int64_t ldy, __mmask16 keep) {
  __m512 acc[C], acc_m[C];
  for (int c = 0; c < C; ++c) acc[c] = acc_m[c] = _mm512_setzero_ps();
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  for (int64_t sb = 0; sb < in / 256; ++sb) {
    const uint8_t* unit = group + sb * kQ4KR16UnitBytes;
    // The unit after next, requested while this one is multiplied (prefetchnta, as the FP GEMVs
    // of linear_driver.h): without a prefetch the GEMV read DRAM at 38 GB/s against the
    // row-at-a-time K kernel's 45, with the next unit 52 (mla_bench_linear
    // Q4_K_R16/4096x2048/n1, 2 threads, Zen 5); two units ahead went with the K row kernel's
    // longer prefetch (linear_ggml_vnni_k.h kGgmlKAheadBytes; docs/BENCHMARKS.md).
    for (int b = 0; b < kQ4KR16UnitBytes; b += 64)
      __builtin_prefetch(unit + 2 * kQ4KR16UnitBytes + b, 0, 0);
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(unit)));
    const __m512 dmin =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(unit + 32)));
    const auto [sc03, m03, sc47, m47] = ggml_r16k_scales(unit);
    __m512i sc[8];
    for (int j = 0; j < 8; ++j)
      sc[j] = _mm512_and_si512(_mm512_srli_epi32(j < 4 ? sc03 : sc47, 8 * (j % 4)),
                               _mm512_set1_epi32(0xff));
    // The mins as int16 pairs (m0, m2), (m1, m3), (m4, m6), (m5, m7), matching x's S pairs.
    const __m512i lo8 = _mm512_set1_epi32(0x00ff00ff);
    const __m512i mp[4] = {
        _mm512_and_si512(m03, lo8), _mm512_and_si512(_mm512_srli_epi32(m03, 8), lo8),
        _mm512_and_si512(m47, lo8), _mm512_and_si512(_mm512_srli_epi32(m47, 8), lo8)};
    const uint8_t* quads = unit + 256;
    for (int c = 0; c < C; ++c) {
      const int8_t* xc = xs[c].codes + 256 * sb;
      __m512i isum[8];  // per sub-block j: Σ q·q_x, per row
      for (int j = 0; j < 8; ++j) isum[j] = _mm512_setzero_si512();
      for (int ch = 0; ch < 4; ++ch)
        for (int k = 0; k < 8; ++k) {
          const __m512i v = _mm512_loadu_si512(quads + 64 * (8 * ch + k));
          int32_t x_lo, x_hi;
          std::memcpy(&x_lo, xc + 64 * ch + 4 * k, 4);
          std::memcpy(&x_hi, xc + 64 * ch + 32 + 4 * k, 4);
          isum[2 * ch] =
              _mm512_dpbusd_epi32(isum[2 * ch], _mm512_and_si512(v, m4), _mm512_set1_epi32(x_lo));
          isum[2 * ch + 1] =
              _mm512_dpbusd_epi32(isum[2 * ch + 1], _mm512_and_si512(_mm512_srli_epi16(v, 4), m4),
                                  _mm512_set1_epi32(x_hi));
        }
      __m512i tot = _mm512_mullo_epi32(isum[0], sc[0]);
      for (int j = 1; j < 8; ++j) tot = _mm512_add_epi32(tot, _mm512_mullo_epi32(isum[j], sc[j]));
      __m512i mins = _mm512_setzero_si512();
      for (int p = 0; p < 4; ++p)
        mins = _mm512_dpwssd_epi32(mins, mp[p], _mm512_set1_epi32(xs[c].pairs[4 * sb + p]));
      const __m512 dx = _mm512_set1_ps(xs[c].dx[sb]);
      acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(tot), _mm512_mul_ps(d, dx), acc[c]);
      acc_m[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(mins), _mm512_mul_ps(dmin, dx), acc_m[c]);
    }
  }
  for (int c = 0; c < C; ++c)
    _mm512_mask_storeu_ps(y + c * ldy, keep, _mm512_sub_ps(acc[c], acc_m[c]));
}

// Rows [r0, r1) of a kQ4_KR16 weight against all n quantised rows of x at xq: whole groups of
// 16, the lanes outside [r0, r1) computed and not stored.
inline void ggml_r16k_chunk(const LinearWeight& w, int64_t n, const uint8_t* xq, float* y,
                            int64_t r0, int64_t r1) {
  const int64_t group_bytes = kR16Rows * dtype_bytes(DType::kQ4_K, w.in);
  ggml_x_groups<GgmlR16KXRow>(
      n, xq, ggml_r16k_x_row_bytes(w.in), w.out, y,
      [&](const uint8_t* p) { return ggml_r16k_x_row(p, w.in); },
      [&](auto N, const GgmlR16KXRow* xs, float* yg) {
        ggml_r16_for_groups(r0, r1, [&](int64_t g, __mmask16 keep) {
          ggml_r16k_group<decltype(N)::value>(w.data + g * group_bytes, w.in, xs, yg + g * kR16Rows,
                                              w.out, keep);
        });
      });
}

}  // namespace
}  // namespace mla::cpu
