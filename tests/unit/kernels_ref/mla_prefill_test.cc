// Tests of ref::mla_prefill (decompressed), ref::absorb_query / unabsorb_output, and the
// equivalence of the absorbed decode and the decompressed prefill (docs/MODELS.md §Absorbed
// attention).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <sstream>
#include <vector>

#include "attention_test_util.h"

namespace mla::ref {
namespace {

using namespace test_util;

TEST(RefAbsorb, SmallIntegerCase) {
  // Integer inputs: every FP64 sum is exact, so equality is exact.
  // h_q 1, d_n 2, d_r 1, r 3, d_v 2.  W_UK = [[1, 2, 3], [-1, 0, 4]], q = [2, -3 | 7].
  const std::vector<float> w_uk = {1, 2, 3, -1, 0, 4};
  const std::vector<float> q = {2, -3, 7};
  double q_abs[4];
  absorb_query(1, 1, 2, 1, 3, q.data(), w_uk.data(), q_abs);
  EXPECT_EQ(q_abs[0], 2 * 1 + -3 * -1);  // W_UK^T q_nope
  EXPECT_EQ(q_abs[1], 2 * 2 + -3 * 0);
  EXPECT_EQ(q_abs[2], 2 * 3 + -3 * 4);
  EXPECT_EQ(q_abs[3], 7);  // q_pe copied
  // W_UV = [[1, 0, -2], [3, 1, 1]], o_lat = [0.5, -1, 2].
  const std::vector<float> w_uv = {1, 0, -2, 3, 1, 1};
  const double o_lat[3] = {0.5, -1, 2};
  double o[2];
  unabsorb_output(1, 1, 2, 3, o_lat, w_uv.data(), o);
  EXPECT_EQ(o[0], 0.5 - 4);
  EXPECT_EQ(o[1], 1.5 - 1 + 2);
}

TEST(RefAbsorb, HeadsAndTokensIndexIndependently) {
  // Two tokens, two heads: each (s, h) must use q[s, h] and W[h] only. Checked against a
  // one-(s, h) call per pair, which has no indexing to get wrong: exact.
  const int s_q = 2, h_q = 2, d_n = 3, d_r = 2, r = 4, d_v = 3;
  Rng rng(21);
  const std::vector<float> q = random_bf16_values(rng, size_t(s_q) * h_q * (d_n + d_r));
  const std::vector<float> w_uk = random_bf16_values(rng, size_t(h_q) * d_n * r);
  const std::vector<float> w_uv = random_bf16_values(rng, size_t(h_q) * d_v * r);
  std::vector<double> q_abs(size_t(s_q) * h_q * (r + d_r)), o(size_t(s_q) * h_q * d_v);
  absorb_query(s_q, h_q, d_n, d_r, r, q.data(), w_uk.data(), q_abs.data());
  std::vector<double> o_lat(size_t(s_q) * h_q * r);
  for (size_t i = 0; i < o_lat.size(); ++i) o_lat[i] = rng.normal();
  unabsorb_output(s_q, h_q, d_v, r, o_lat.data(), w_uv.data(), o.data());
  for (int s = 0; s < s_q; ++s)
    for (int h = 0; h < h_q; ++h) {
      const size_t sh = size_t(s) * h_q + h;
      double one[6], one_o[3];
      absorb_query(1, 1, d_n, d_r, r, &q[sh * (d_n + d_r)], &w_uk[size_t(h) * d_n * r], one);
      for (int k = 0; k < r + d_r; ++k) EXPECT_EQ(q_abs[sh * (r + d_r) + k], one[k]);
      unabsorb_output(1, 1, d_v, r, &o_lat[sh * r], &w_uv[size_t(h) * d_v * r], one_o);
      for (int j = 0; j < d_v; ++j) EXPECT_EQ(o[sh * d_v + j], one_o[j]);
    }
}

TEST(RefMlaPrefill, OneKeyGivesItsUpProjectedValue) {
  // Small integers and a dyadic scale: k_nope, v and the score are exact in FP64; the single
  // probability is 1, so out = W_UV c exactly and lse = score.
  // h_q 1, d_n 2, d_r 1, r 2, d_v 2; row c = [1, 2 | k_pe 3].
  const PrefillDims d{1, 1, 2, 1, 2, 2};
  const std::vector<float> w_uk = {1, -1, 2, 0};  // k_nope = [1 - 2, 2] = [-1, 2]
  const std::vector<float> w_uv = {3, 1, -2, 5};  // v = [3 + 2, -2 + 10] = [5, 8]
  const std::vector<float> q = {4, 1, 0.5f};      // score = 0.25 (-4 + 2 + 1.5) = -0.125
  PagedKv kv = make_paged_kv({{1, 2, 3}}, 3, 4, 1, 22, true);
  for (bool causal : {false, true}) {
    AttnOut r = run_prefill(kv, 0, DType::kBF16, d, q, w_uk, w_uv, 0.25f, causal);
    EXPECT_EQ(r.out[0], 5.0f);
    EXPECT_EQ(r.out[1], 8.0f);
    EXPECT_EQ(r.lse[0], -0.125f);
    EXPECT_EQ(r.scores[0], -0.125f);
    EXPECT_EQ(r.scores[1], kScoreSentinel);
  }
}

TEST(RefMlaPrefill, EmptyRows) {
  // s_kv = 0 (any mode), and causal s_kv 2 < s_q 3: rows with no visible key give 0 and +inf.
  const PrefillDims d{3, 2, 4, 2, 3, 5};
  Rng rng(23);
  const std::vector<float> q = random_bf16_values(rng, size_t(d.s_q) * d.h_q * (d.d_n + d.d_r));
  const std::vector<float> w_uk = random_bf16_values(rng, size_t(d.h_q) * d.d_n * d.r);
  const std::vector<float> w_uv = random_bf16_values(rng, size_t(d.h_q) * d.d_v * d.r);
  for (bool causal : {false, true}) {
    PagedKv none = make_paged_kv({{}}, d.r + d.d_r, 4, 1, 24, true);
    AttnOut r = run_prefill(none, 0, DType::kBF16, d, q, w_uk, w_uv, 0.3f, causal);
    for (float x : r.out) EXPECT_EQ(x, 0.0f);
    for (float x : r.lse) EXPECT_EQ(x, kInfF);
    for (float x : r.scores) EXPECT_EQ(x, kScoreSentinel);
  }
  PagedKv two = make_paged_kv({random_bf16_values(rng, 2 * size_t(d.r + d.d_r))}, d.r + d.d_r, 4, 1,
                              25, true);
  AttnOut r = run_prefill(two, 0, DType::kBF16, d, q, w_uk, w_uv, 0.3f, true);
  // Visible keys per row: 2 - 3 + s + 1 = 0, 1, 2.
  for (int h = 0; h < d.h_q; ++h) {
    for (int j = 0; j < d.d_v; ++j) EXPECT_EQ(r.out[size_t(h) * d.d_v + j], 0.0f);
    EXPECT_EQ(r.lse[size_t(h) * d.s_q + 0], kInfF);
    EXPECT_EQ(r.scores[size_t(h) * r.stride + 0], -kInfF);
    EXPECT_EQ(r.scores[size_t(h) * r.stride + 1], -kInfF);
    EXPECT_TRUE(std::isfinite(r.lse[size_t(h) * d.s_q + 1]));
    EXPECT_EQ(r.scores[(size_t(1) * d.h_q + h) * r.stride + 1], -kInfF);
    EXPECT_TRUE(std::isfinite(r.scores[(size_t(2) * d.h_q + h) * r.stride + 1]));
  }
}

TEST(RefMlaPrefill, PoisonAndStorageDtype) {
  // NaN past s_kv and in spare pages, BF16 vs F32 storage of the same values: all bit-identical.
  const PrefillDims d{2, 3, 8, 4, 8, 16};
  const int d_row = d.r + d.d_r, s_kv = 33;
  Rng rng(26);
  const std::vector<float> rows = random_bf16_values(rng, size_t(s_kv) * d_row);
  const std::vector<float> q = random_bf16_values(rng, size_t(d.s_q) * d.h_q * (d.d_n + d.d_r));
  const std::vector<float> w_uk = random_bf16_values(rng, size_t(d.h_q) * d.d_n * d.r, 0.25);
  const std::vector<float> w_uv = random_bf16_values(rng, size_t(d.h_q) * d.d_v * d.r, 0.25);
  PagedKv clean = make_paged_kv({rows}, d_row, 16, 2, 27, false);
  PagedKv dirty = make_paged_kv({rows}, d_row, 16, 2, 27, true);
  for (bool causal : {false, true}) {
    AttnOut a = run_prefill(clean, 0, DType::kF32, d, q, w_uk, w_uv, 0.2f, causal);
    AttnOut b = run_prefill(dirty, 0, DType::kBF16, d, q, w_uk, w_uv, 0.2f, causal);
    EXPECT_TRUE(same_bits(a.out, b.out));
    EXPECT_TRUE(same_bits(a.lse, b.lse));
    EXPECT_TRUE(same_bits(a.scores, b.scores));
    for (float x : b.out) ASSERT_TRUE(std::isfinite(x));
  }
}

// Absorbed (decode on W_UK^T q, then W_UV o_lat) against decompressed (prefill), which are equal
// in exact arithmetic. Error budget per output element o[s, h, j], with u = u32, scale sigma,
// c_t the latent of key t and W = W_UV[h]:
//  1. q_lat is rounded to FP32 for decode: each score moves by at most
//       e_t = sigma u sum_k |q_lat_k| |c_tk|;  E = max_t e_t.
//     Scores moved by <= E change every probability by a factor within exp(+-2E), so
//     |sum_t dp_t v_tj| <= expm1(2E) sum_t p_t |v_tj| <= expm1(2E) M_j,
//       M_j = max_t sum_k |W_jk| |c_tk|  (>= max_t |v_tj|).
//  2. decode stores o_lat in FP32: sum_k |W_jk| |o_lat_k| u <= u M_j.
//  3. prefill stores o in FP32: u |o_j| <= u M_j.
//  4. FP64 rounding in both, sums of <= r + d_n + s_kv terms: far below 1e-12 M_j.
// So |o_abs - o_dec| <= (expm1(2E) + 2u + 1e-12) M_j: ~1e-6 relative here. The LSE moves by at
// most E (log-sum-exp is 1-Lipschitz in the max norm) plus u |lse| for each FP32 store; each score
// by e_t plus u |score| for each store.
TEST(RefMlaPrefill, AbsorbedDecodeEqualsDecompressedPrefill) {
  const int h_q = 3, d_n = 16, d_r = 8, r = 32, d_v = 16, s_q = 2, page_size = 16;
  const int d_row = r + d_r, b = 2;
  const int s_kv_of[b] = {37, 20};
  const float scale = float(1.0 / std::sqrt(double(d_n + d_r)));
  const PrefillDims d{s_q, h_q, d_n, d_r, d_v, r};
  Rng rng(31);
  std::vector<std::vector<float>> rows;
  for (int s_kv : s_kv_of) rows.push_back(random_bf16_values(rng, size_t(s_kv) * d_row));
  // Unit-variance scores: q ~ N(0, 1), W ~ N(0, 1/r) so k_nope and v have unit variance.
  const std::vector<float> w_uk = random_bf16_values(rng, size_t(h_q) * d_n * r, 1 / std::sqrt(r));
  const std::vector<float> w_uv = random_bf16_values(rng, size_t(h_q) * d_v * r, 1 / std::sqrt(r));
  std::vector<std::vector<float>> q(b);  // [s_q, h_q, d_n + d_r] per sequence
  std::vector<float> q_dec;              // [b, s_q, h_q, r + d_r] absorbed, rounded to FP32
  std::vector<std::vector<double>> q_abs(b);
  for (int i = 0; i < b; ++i) {
    for (size_t k = 0; k < size_t(s_q) * h_q * (d_n + d_r); ++k)
      q[i].push_back(float(rng.normal()));
    q_abs[i].resize(size_t(s_q) * h_q * d_row);
    absorb_query(s_q, h_q, d_n, d_r, r, q[i].data(), w_uk.data(), q_abs[i].data());
    for (double x : q_abs[i]) q_dec.push_back(float(x));
  }
  PagedKv kv = make_paged_kv(rows, d_row, page_size, 3, 32, true);

  for (bool causal : {false, true}) {
    AttnOut dec = run_decode(kv, DType::kBF16, s_q, h_q, r, q_dec, DType::kF32, scale, causal);
    double worst_rel = 0, worst_bound = 0;
    for (int i = 0; i < b; ++i) {
      const int s_kv = s_kv_of[i];
      AttnOut pre = run_prefill(kv, i, DType::kBF16, d, q[i], w_uk, w_uv, scale, causal);
      std::vector<double> o_lat(size_t(s_q) * h_q * r), o(size_t(s_q) * h_q * d_v);
      for (size_t k = 0; k < o_lat.size(); ++k) o_lat[k] = dec.out[size_t(i) * s_q * h_q * r + k];
      unabsorb_output(s_q, h_q, d_v, r, o_lat.data(), w_uv.data(), o.data());

      for (int s = 0; s < s_q; ++s)
        for (int h = 0; h < h_q; ++h) {
          const size_t sh = size_t(s) * h_q + h;
          const double* ql = &q_abs[i][sh * d_row];
          const float* w = &w_uv[size_t(h) * d_v * r];
          const int n = visible_keys(s_kv, s_q, s, causal);
          ASSERT_GT(n, 0);
          double E = 0;
          std::vector<double> e(n), M(d_v, 0.0);
          for (int t = 0; t < n; ++t) {
            const float* c = &rows[i][size_t(t) * d_row];
            for (int k = 0; k < r; ++k) e[t] += scale * kU32 * std::abs(ql[k]) * std::abs(c[k]);
            E = std::max(E, e[t]);
            for (int j = 0; j < d_v; ++j) {
              double m = 0;
              for (int k = 0; k < r; ++k) m += std::abs(w[size_t(j) * r + k]) * std::abs(c[k]);
              M[j] = std::max(M[j], m);
            }
          }
          for (int j = 0; j < d_v; ++j) {
            const double got = o[sh * d_v + j], want = pre.out[sh * d_v + j];
            const double tol = (std::expm1(2 * E) + 2 * kU32 + 1e-12) * M[j];
            EXPECT_NEAR(got, want, tol) << "seq " << i << " s " << s << " h " << h << " j " << j;
            worst_rel = std::max(worst_rel, std::abs(got - want) / M[j]);
            worst_bound = std::max(worst_bound, tol / M[j]);
          }
          const double lse_d = dec.lse[(size_t(i) * h_q + h) * s_q + s];
          const double lse_p = pre.lse[size_t(h) * s_q + s];
          EXPECT_NEAR(lse_d, lse_p, E + kU32 * (std::abs(lse_d) + std::abs(lse_p)) + 1e-12);
          const float* sc_d = &dec.scores[(size_t(i) * s_q * h_q + sh) * dec.stride];
          const float* sc_p = &pre.scores[sh * pre.stride];
          for (int t = 0; t < s_kv; ++t) {
            if (t >= n) {  // identical -inf positions
              EXPECT_EQ(sc_d[t], -kInfF);
              EXPECT_EQ(sc_p[t], -kInfF);
              continue;
            }
            const double tol = e[t] + kU32 * (std::abs(sc_d[t]) + std::abs(sc_p[t])) + 1e-12;
            EXPECT_NEAR(sc_d[t], sc_p[t], tol) << "seq " << i << " s " << s << " t " << t;
          }
        }
      bool any_nonzero = false;
      for (float x : pre.out) any_nonzero |= x != 0.0f;
      EXPECT_TRUE(any_nonzero);
    }
    // The bound is ~1e-6 of M_j; the observed error is recorded for the report.
    std::ostringstream note;
    note << std::scientific << std::setprecision(2) << worst_rel << " of M_j (bound " << worst_bound
         << ")";
    RecordProperty(causal ? "error_causal" : "error", note.str());
  }
}

}  // namespace
}  // namespace mla::ref
