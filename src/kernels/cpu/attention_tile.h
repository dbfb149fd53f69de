// One flash-attention step over a tile of kTile keys for a block of R query rows, in FP32, with
// the rows as vector lanes: scores ST = (Q·Kᵀ)ᵀ key-major, online softmax (running max m and sum
// l per row), O = O·corr + P·V. Shared by the absorbed decode (rows = heads × queries, one K for
// all) and the decompressed prefill (rows = queries of one head). Templated on the Vec type of
// the ISA; include inside the ISA's `#pragma GCC target` region. Internal linkage.
// docs/kernels/mla_decode.md explains the register blocking.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace mla::cpu {
namespace {

constexpr int kTile = 64;  // keys per tile: a 64-token BF16 page of 576 channels is 72 KiB (L2)
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

inline int round_up(int x, int m) {
  return (x + m - 1) / m * m;
}

// Running softmax state of R rows: O [R][ld_o], m [R], l [R].
struct RowBlockState {
  float* o;
  int64_t ld_o;
  float* m;
  float* l;
};

// ST[j0 + kk][v0 + k·W ...] (+)= Σ_c qT[c][v0 + k·W ...] · key_kk[c] for NK keys × NV vectors
// of rows: rows are the lanes, each key value is broadcast. kAccumulate adds to ST (a second run
// over more channels, e.g. the k_pe part of a decompressed key).
//   qT [d][ld] (rows padded to W);  keys[kk] → d values;  ST [NK][ld] at the block's corner.
template <class V, int NV, int NK, bool kAccumulate = false>
inline void score_block_rows_f32(const float* qT, int ld, int d, const float* const* keys,
                                 float* ST) {
  constexpr int W = V::kWidth;
  V acc[NK][NV];
  for (int kk = 0; kk < NK; ++kk)
    for (int k = 0; k < NV; ++k)
      acc[kk][k] = kAccumulate ? V::load(ST + int64_t(kk) * ld + k * W) : V::zero();
  for (int c = 0; c < d; ++c) {
    V q[NV];
    for (int k = 0; k < NV; ++k) q[k] = V::load(qT + int64_t(c) * ld + k * W);
    for (int kk = 0; kk < NK; ++kk) {
      const V b = V::set1(keys[kk][c]);
      for (int k = 0; k < NV; ++k) acc[kk][k] = fma(q[k], b, acc[kk][k]);
    }
  }
  for (int kk = 0; kk < NK; ++kk)
    for (int k = 0; k < NV; ++k) acc[kk][k].store(ST + int64_t(kk) * ld + k * W);
}

// Keys per score block for NV row vectors: enough independent accumulators to hide FMA latency
// within the register file (16 on AVX2, 32 on AVX-512).
template <class V, int NV>
constexpr int keys_per_block() {
  if constexpr (V::kWidth == 8) return NV >= 3 ? 2 : NV == 2 ? 4 : 8;
  return NV >= 3 ? 4 : NV == 2 ? 8 : 16;
}

// The same online-softmax step with rows as vector lanes, for the absorbed decode whose score
// product leaves S transposed: ST [kTile][ld] (key-major, ld = rows padded to W). No horizontal
// reductions: running max, sum and correction of W rows live in one vector each.
//   limit [ld] keys each row may see in this tile, as floats (0 for padding rows);
//   m, l, corr [ld]. Masked keys become −inf before the max; rows that have seen nothing keep
//   m = −inf, l = 0 and get corr 0 (their O is still zero).
// keys: rows of ST (kTile, or a Tile policy's larger step of several tiles).
template <class V>
void softmax_tile_rows(float* ST, int ld, int R, const float* limit, int n_valid, float scale,
                       RowBlockState st, float* corr, float* const* score_rows, int keys = kTile) {
  constexpr int W = V::kWidth;
  const V vscale = V::set1(scale), ninf = V::set1(kNegInf), zero = V::zero();
  const V lowest = V::set1(-std::numeric_limits<float>::max());
  for (int r = 0; r < ld; r += W) {
    const V lim = V::load(limit + r);
    V mx = ninf;
    for (int j = 0; j < keys; ++j) {
      float* s = ST + int64_t(j) * ld + r;
      const V x = V::where_lt(V::set1(float(j)), lim, V::load(s) * vscale, ninf);
      x.store(s);
      mx = max(mx, x);
    }
    if (score_rows)  // checking only: the scaled, masked logits of keys [0, n_valid)
      for (int i = r; i < std::min(r + W, R); ++i)
        if (score_rows[i])
          for (int j = 0; j < n_valid; ++j) score_rows[i][j] = ST[int64_t(j) * ld + i];
    const V m_old = V::load(st.m + r), m_new = max(m_old, mx);
    const V m_ref = V::where_lt(m_new, lowest, zero, m_new);  // −inf rows: exp(−inf − 0) = 0
    const V c = V::exp(m_old - m_ref);
    V sum = zero;
    for (int j = 0; j < keys; ++j) {
      float* s = ST + int64_t(j) * ld + r;
      const V p = V::exp(V::load(s) - m_ref);
      p.store(s);
      sum = sum + p;
    }
    (V::load(st.l + r) * c + sum).store(st.l + r);
    m_new.store(st.m + r);
    c.store(corr + r);
  }
}

// O[i] = O[i]·corr[i] + Σ_{t<n} P(i, t) · v[t] over d_v_pad channels, P(i, t) at
// P[i·p_row + t·p_key] (row-major [R][kTile] by default; the decode keeps it [kTile][rows]).
//   v [n][v_stride] fp32 rows (at least d_v_pad readable floats each);
//   O [R][ld_o] with d_v_pad a multiple of 4·W. Blocks of 4 rows × 4 vectors of channels.
template <class V>
void pv_tile(const float* P, int R, int n, const float* v, int64_t v_stride, int d_v_pad,
             const float* corr, RowBlockState st, int64_t p_row = kTile, int64_t p_key = 1) {
  constexpr int W = V::kWidth;
  for (int ch = 0; ch < d_v_pad; ch += 4 * W) {
    int i = 0;
    for (; i + 4 <= R; i += 4) {
      V acc[4][4];
      for (int r = 0; r < 4; ++r) {
        const V c = V::set1(corr[i + r]);
        for (int j = 0; j < 4; ++j) acc[r][j] = V::load(st.o + (i + r) * st.ld_o + ch + j * W) * c;
      }
      const float* p0 = P + int64_t(i) * p_row;
      for (int t = 0; t < n; ++t) {
        const float* vt = v + int64_t(t) * v_stride + ch;
        const V v0 = V::load(vt), v1 = V::load(vt + W), v2 = V::load(vt + 2 * W),
                v3 = V::load(vt + 3 * W);
        for (int r = 0; r < 4; ++r) {
          const V a = V::set1(p0[r * p_row + t * p_key]);
          acc[r][0] = fma(a, v0, acc[r][0]);
          acc[r][1] = fma(a, v1, acc[r][1]);
          acc[r][2] = fma(a, v2, acc[r][2]);
          acc[r][3] = fma(a, v3, acc[r][3]);
        }
      }
      for (int r = 0; r < 4; ++r)
        for (int j = 0; j < 4; ++j) acc[r][j].store(st.o + (i + r) * st.ld_o + ch + j * W);
    }
    for (; i < R; ++i) {
      V acc[4];
      const V c = V::set1(corr[i]);
      for (int j = 0; j < 4; ++j) acc[j] = V::load(st.o + i * st.ld_o + ch + j * W) * c;
      const float* pi = P + int64_t(i) * p_row;
      for (int t = 0; t < n; ++t) {
        const float* vt = v + int64_t(t) * v_stride + ch;
        const V a = V::set1(pi[t * p_key]);
        for (int j = 0; j < 4; ++j) acc[j] = fma(a, V::load(vt + j * W), acc[j]);
      }
      for (int j = 0; j < 4; ++j) acc[j].store(st.o + i * st.ld_o + ch + j * W);
    }
  }
}

// Writes o = O / l (d_v channels) and lse = m + ln l; an empty row (l == 0) gives o = 0 and
// lse = −inf, meaning "no contribution" to a later LSE merge.
inline void finish_rows(int R, int d_v, RowBlockState st, float* o, int64_t ld_out, float* lse) {
  for (int i = 0; i < R; ++i) {
    float* out = o + i * ld_out;
    const float l = st.l[i];
    if (l == 0.0f) {
      std::fill(out, out + d_v, 0.0f);
      lse[i] = kNegInf;
      continue;
    }
    const float inv = 1.0f / l;  // NaN propagates
    for (int c = 0; c < d_v; ++c) out[c] = st.o[i * st.ld_o + c] * inv;
    lse[i] = st.m[i] + std::log(l);
  }
}

}  // namespace
}  // namespace mla::cpu
