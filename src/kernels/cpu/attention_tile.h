// One flash-attention step over a tile of kTile keys for a block of R query rows, in FP32:
// scores S = Q·Kᵀ, online softmax (running max m and sum l per row), O = O·corr + P·V.
// Shared by the absorbed decode (rows = heads × queries, one K for all) and the decompressed
// prefill (rows = queries of one head). Templated on the Vec type of the ISA; include inside the
// ISA's `#pragma GCC target` region. Internal linkage. docs/kernels/mla_decode.md explains the
// register blocking.
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

// S[i][0:kTile] = Σ_c q[i][c] · kt[c][0:kTile] for i < R.
//   q  [R][q_stride] fp32;  kt [d_qk][kTile] fp32 (keys transposed, columns past the tile's keys
//   zero);  S [R][kTile].  Blocks of 4 rows × 4 vectors of keys keep 16 accumulators in registers;
//   each kt load is reused by 4 rows.
template <class V>
void score_tile(const float* q, int64_t q_stride, int R, int d_qk, const float* kt, float* S) {
  constexpr int W = V::kWidth;
  static_assert(kTile % (4 * W) == 0, "a tile holds whole 4-vector column blocks");
  for (int c0 = 0; c0 < kTile; c0 += 4 * W) {
    int i = 0;
    for (; i + 4 <= R; i += 4) {
      V acc[4][4];
      for (auto& row : acc)
        for (auto& a : row) a = V::zero();
      const float* q0 = q + int64_t(i) * q_stride;
      for (int c = 0; c < d_qk; ++c) {
        const float* k = kt + int64_t(c) * kTile + c0;
        const V k0 = V::load(k), k1 = V::load(k + W), k2 = V::load(k + 2 * W),
                k3 = V::load(k + 3 * W);
        for (int r = 0; r < 4; ++r) {
          const V a = V::set1(q0[r * q_stride + c]);
          acc[r][0] = fma(a, k0, acc[r][0]);
          acc[r][1] = fma(a, k1, acc[r][1]);
          acc[r][2] = fma(a, k2, acc[r][2]);
          acc[r][3] = fma(a, k3, acc[r][3]);
        }
      }
      for (int r = 0; r < 4; ++r)
        for (int j = 0; j < 4; ++j) acc[r][j].store(S + int64_t(i + r) * kTile + c0 + j * W);
    }
    for (; i < R; ++i) {
      V acc[4] = {V::zero(), V::zero(), V::zero(), V::zero()};
      const float* qi = q + int64_t(i) * q_stride;
      for (int c = 0; c < d_qk; ++c) {
        const float* k = kt + int64_t(c) * kTile + c0;
        const V a = V::set1(qi[c]);
        for (int j = 0; j < 4; ++j) acc[j] = fma(a, V::load(k + j * W), acc[j]);
      }
      for (int j = 0; j < 4; ++j) acc[j].store(S + int64_t(i) * kTile + c0 + j * W);
    }
  }
}

// Turns raw dot products S [R][kTile] into probabilities P (in place) and updates the running
// state. limit[i] = keys of this tile row i may see (0..kTile). corr[i] receives the factor the
// row's O must be scaled by before P·V is added. If score_rows is given, score_rows[i] (may be
// null per row) receives the scaled logits of keys [0, n_valid), −inf where masked.
template <class V>
void softmax_tile(float* S, int R, const int* limit, int n_valid, float scale, RowBlockState st,
                  float* corr, float* const* score_rows) {
  constexpr int W = V::kWidth;
  const V vscale = V::set1(scale);
  for (int i = 0; i < R; ++i) {
    float* s = S + int64_t(i) * kTile;
    const int n = limit[i];
    for (int j = 0; j < kTile; j += W) (V::load(s + j) * vscale).store(s + j);
    for (int j = std::max(n, 0); j < kTile; ++j) s[j] = kNegInf;
    if (score_rows && score_rows[i]) std::copy(s, s + n_valid, score_rows[i]);
    if (n <= 0) {  // nothing visible in this tile: state unchanged
      corr[i] = 1.0f;
      std::fill(s, s + kTile, 0.0f);
      continue;
    }
    V mx = V::set1(kNegInf);
    for (int j = 0; j < kTile; j += W) mx = max(mx, V::load(s + j));
    const float m_old = st.m[i];
    const float m_new = std::max(m_old, mx.reduce_max());
    const V vm = V::set1(m_new);
    V sum = V::zero();
    for (int j = 0; j < kTile; j += W) {
      const V p = V::exp(V::load(s + j) - vm);
      p.store(s + j);
      sum = sum + p;
    }
    corr[i] = m_old == kNegInf ? 0.0f : V::exp(V::set1(m_old - m_new)).reduce_max();
    st.l[i] = st.l[i] * corr[i] + sum.reduce_add();
    st.m[i] = m_new;
  }
}

// The same online-softmax step with rows as vector lanes, for the absorbed decode whose score
// product leaves S transposed: ST [kTile][ld] (key-major, ld = rows padded to W). No horizontal
// reductions: running max, sum and correction of W rows live in one vector each.
//   limit [ld] keys each row may see in this tile, as floats (0 for padding rows);
//   m, l, corr [ld]. Masked keys become −inf before the max; rows that have seen nothing keep
//   m = −inf, l = 0 and get corr 0 (their O is still zero).
template <class V>
void softmax_tile_rows(float* ST, int ld, int R, const float* limit, int n_valid, float scale,
                       RowBlockState st, float* corr, float* const* score_rows) {
  constexpr int W = V::kWidth;
  const V vscale = V::set1(scale), ninf = V::set1(kNegInf), zero = V::zero();
  const V lowest = V::set1(-std::numeric_limits<float>::max());
  for (int r = 0; r < ld; r += W) {
    const V lim = V::load(limit + r);
    V mx = ninf;
    for (int j = 0; j < kTile; ++j) {
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
    for (int j = 0; j < kTile; ++j) {
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
