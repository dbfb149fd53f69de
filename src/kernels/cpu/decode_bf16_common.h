// Pieces shared by the BF16-dot absorbed-decode tiles (AVX512_BF16): the query transposed into
// BF16 channel pairs with rows as the lanes, and the score product over a range of channel pairs
// with keys broadcast as 32-bit pairs. Include inside the ISA's target region. Internal linkage.
#pragma once

#include <cstring>

#include "kernels/cpu/attention_tile.h"
#include "kernels/cpu/cache_row_bf16.h"
#include "kernels/mla_params.h"

namespace mla::cpu {
namespace {

// Word permutes of two 32-word vectors a, b into (a[k], b[k]) pairs: kLo for k < 16, kHi above.
alignas(64) constexpr uint16_t kPairLo[32] = {0,  32, 1,  33, 2,  34, 3,  35, 4,  36, 5,
                                              37, 6,  38, 7,  39, 8,  40, 9,  41, 10, 42,
                                              11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
alignas(64) constexpr uint16_t kPairHi[32] = {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21,
                                              53, 22, 54, 23, 55, 24, 56, 25, 57, 26, 58,
                                              27, 59, 28, 60, 29, 61, 30, 62, 31, 63};
// One vector: words 0-15 (a) and 16-31 (b) into pairs.
alignas(64) constexpr uint16_t kPairHalves[32] = {0,  16, 1,  17, 2,  18, 3,  19, 4,  20, 5,
                                                  21, 6,  22, 7,  23, 8,  24, 9,  25, 10, 26,
                                                  11, 27, 12, 28, 13, 29, 14, 30, 15, 31};

inline uint32_t load_u32(const uint8_t* p) {
  uint32_t w;
  std::memcpy(&w, p, 4);
  return w;
}

// vp [n_pairs][vp_stride] u32 = (v[2t][c], v[2t+1][c]) for the BF16 rows rows[0 .. 2·n_pairs),
// c < dv_pad (a multiple of 32); channels d_v .. dv_pad are zero.
inline void build_v_pairs(const uint8_t* const* rows, int n_pairs, int d_v, int dv_pad,
                          uint32_t* vp, int64_t vp_stride) {
  const __m512i lo_idx = _mm512_load_si512(kPairLo), hi_idx = _mm512_load_si512(kPairHi);
  for (int t2 = 0; t2 < n_pairs; ++t2) {
    uint32_t* dst = vp + int64_t(t2) * vp_stride;
    for (int ch = 0; ch < dv_pad; ch += 32) {
      const __mmask32 m = first_n32(d_v - ch);
      const __m512i x = _mm512_maskz_loadu_epi16(m, rows[2 * t2] + 2 * ch);
      const __m512i y = _mm512_maskz_loadu_epi16(m, rows[2 * t2 + 1] + 2 * ch);
      _mm512_store_si512(dst + ch, _mm512_permutex2var_epi16(x, lo_idx, y));
      _mm512_store_si512(dst + ch + 16, _mm512_permutex2var_epi16(x, hi_idx, y));
    }
  }
}

// pp [n_pairs][ld] u32 = BF16 pairs (P[2t][r]·s_2t, P[2t+1][r]·s_2t+1) of the probabilities
// PT [≥ 2·n_pairs][ld] (key-major), each times its key's V scale s_t = key_scale[t·stride]
// (0 for keys t ≥ n) or, without key scales, the uniform scale. One BF16 rounding per term.
inline void probability_pairs(const float* PT, int ld, int n_pairs, int n, const float* key_scale,
                              int64_t key_scale_stride, float scale, uint32_t* pp) {
  const __m512i halves = _mm512_load_si512(kPairHalves);
  auto s_of = [&](int t) {
    return _mm512_set1_ps(!key_scale ? scale : t < n ? key_scale[t * key_scale_stride] : 0.0f);
  };
  for (int t2 = 0; t2 < n_pairs; ++t2) {
    const __m512 s0 = s_of(2 * t2), s1 = s_of(2 * t2 + 1);
    const float* p0 = PT + int64_t(2 * t2) * ld;
    for (int r = 0; r < ld; r += 16) {
      const __m512 a = _mm512_mul_ps(_mm512_loadu_ps(p0 + r), s0);
      const __m512 b = _mm512_mul_ps(_mm512_loadu_ps(p0 + ld + r), s1);
      const __m512i ab = (__m512i)_mm512_cvtne2ps_pbh(b, a);  // a in words 0-15
      _mm512_store_si512(pp + int64_t(t2) * ld + r, _mm512_permutexvar_epi16(halves, ab));
    }
  }
}

// qT [d_qk / 2][ld] u32 = the BF16 channel pairs of query rows r0 .. r0+R-1 of sequence b;
// padding rows (R .. ld) are zero.
inline void transpose_q_pairs(const MlaDecodeParams& p, int b, int r0, int R, int ld,
                              uint32_t* qT) {
  const int d_qk = p.d_qk, d_qk2 = d_qk / 2;
  const uint8_t* q =
      static_cast<const uint8_t*>(p.q) + (int64_t(b) * p.s_q * p.h_q + r0) * d_qk * 2;
  std::fill(qT, qT + size_t(d_qk2) * ld, 0u);
  for (int i = 0; i < R; ++i)
    for (int c2 = 0; c2 < d_qk2; ++c2)
      qT[int64_t(c2) * ld + i] = load_u32(q + (int64_t(i) * d_qk + 2 * c2) * 2);
}

// How the products of one channel-pair range enter ST: stored as they are, or multiplied by a
// per-key (or uniform) scale and stored or added. Quantised latents carry per-block scales that
// the product applies once per key and block instead of once per value.
struct ScoreRangeOp {
  bool add = false;                  // ST += scaled product instead of ST = it
  const float* key_scale = nullptr;  // [kTile] stride key_scale_stride, or null
  int64_t key_scale_stride = 0;
  float scale = 1.0f;  // used when key_scale is null
  bool plain() const { return !add && key_scale == nullptr && scale == 1.0f; }
};

// ST[j0 + kk][v0 + 16k ...] (op)= Σ_{c2 in [c2a, c2b)} dot2(qT[c2][v0 + 16k ...], key_kk[c2]) for
// NK keys × NV vectors of rows; keys are BF16 rows read as 32-bit channel pairs; j0 is the
// tile index of the first key (for per-key scales).
template <int NV, int NK>
inline void score_block_rows_bf16(const uint32_t* qT, int ld, int c2a, int c2b,
                                  const uint8_t* const* keys, int j0, const ScoreRangeOp& op,
                                  float* ST) {
  __m512 acc[NK][NV];
  for (auto& a : acc)
    for (auto& x : a) x = _mm512_setzero_ps();
  for (int c2 = c2a; c2 < c2b; ++c2) {
    __m512bh q[NV];
    for (int k = 0; k < NV; ++k)
      q[k] = (__m512bh)_mm512_loadu_si512(qT + int64_t(c2) * ld + 16 * k);
    for (int kk = 0; kk < NK; ++kk) {
      const __m512bh b = (__m512bh)_mm512_set1_epi32(int(load_u32(keys[kk] + 4 * c2)));
      for (int k = 0; k < NV; ++k) acc[kk][k] = _mm512_dpbf16_ps(acc[kk][k], q[k], b);
    }
  }
  if (op.plain()) {
    for (int kk = 0; kk < NK; ++kk)
      for (int k = 0; k < NV; ++k) _mm512_storeu_ps(ST + int64_t(kk) * ld + 16 * k, acc[kk][k]);
    return;
  }
  for (int kk = 0; kk < NK; ++kk) {
    const __m512 s = _mm512_set1_ps(
        op.key_scale ? op.key_scale[int64_t(j0 + kk) * op.key_scale_stride] : op.scale);
    for (int k = 0; k < NV; ++k) {
      float* dst = ST + int64_t(kk) * ld + 16 * k;
      const __m512 base = op.add ? _mm512_loadu_ps(dst) : _mm512_setzero_ps();
      _mm512_storeu_ps(dst, _mm512_fmadd_ps(acc[kk][k], s, base));
    }
  }
}

// The score products' register blocks over ld row lanes: keys.template operator()<NV, NK>(v)
// for each group of NV 16-lane vectors from lane v, NK keys per block. Fewer row vectors take
// more keys per block: a dot product instruction needs ~10 independent accumulators. One row
// vector (16 heads or fewer: V2-Lite) takes 16 keys: 3-6% faster than 8 at b 1-4, s_kv
// 1,024-4,096 (`mla bench decode --h-q 16`, alternated 4 times).
template <class Keys>
inline void for_row_vectors(int ld, Keys&& keys) {
  for (int v = 0; v < ld;) {
    const int nv = std::min(4, (ld - v) / 16);
    switch (nv) {
      case 4:
        keys.template operator()<4, 4>(v);
        break;
      case 3:
        keys.template operator()<3, 4>(v);
        break;
      case 2:
        keys.template operator()<2, 4>(v);
        break;
      default:
        keys.template operator()<1, 16>(v);
        break;
    }
    v += nv * 16;
  }
}

// ST [kTile][ld] (op)= the products of channel pairs [c2a, c2b) of rows[0 .. kTile) with qT.
inline void score_tile_bf16(const uint32_t* qT, int ld, int c2a, int c2b,
                            const uint8_t* const* rows, const ScoreRangeOp& op, float* ST) {
  for_row_vectors(ld, [&]<int NV, int NK>(int v) {
    static_assert(kTile % NK == 0, "key blocks tile the tile");
    for (int j0 = 0; j0 < kTile; j0 += NK)
      score_block_rows_bf16<NV, NK>(qT + v, ld, c2a, c2b, rows + j0, j0, op,
                                    ST + int64_t(j0) * ld + v);
  });
}

}  // namespace
}  // namespace mla::cpu
