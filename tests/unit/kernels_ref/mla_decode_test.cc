// Tests of ref::mla_decode on hand-computed cases and on the contract's edge rules: causal
// bottom-right masking, empty rows, poisoned slots and table entries, BF16 vs F32 storage.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "attention_test_util.h"

namespace mla::ref {
namespace {

using namespace test_util;

TEST(RefMlaDecode, OneKeyGivesThatRowsValueExactly) {
  // d_qk 6 = 4 "latent" (= V) + 2 "rope". Dyadic values: every score is exact in FP64 and FP32,
  // the single probability is exp(0) / 1 = 1, so out = V bit for bit and lse = score exactly.
  const std::vector<float> row = {1.5f, -2.0f, 0.25f, 3.0f, 0.5f, -1.0f};
  const std::vector<float> q = {1, 0.5f, 0, 0,  2, 0,    // head 0: 0.5 * (1.5 - 1 + 1) = 0.75
                                0, 0,    0, -1, 0, -4};  // head 1: 0.5 * (-3 + 4) = 0.5
  const float want_score[2] = {0.75f, 0.5f};
  for (bool causal : {false, true}) {
    PagedKv kv = make_paged_kv({row}, 6, 4, 2, 1, /*poison=*/true);
    AttnOut r = run_decode(kv, DType::kBF16, 1, 2, 4, q, DType::kF32, 0.5f, causal);
    for (int h = 0; h < 2; ++h) {
      for (int c = 0; c < 4; ++c) EXPECT_EQ(r.out[h * 4 + c], row[c]) << "h " << h << " c " << c;
      EXPECT_EQ(r.lse[h], want_score[h]);
      EXPECT_EQ(r.scores[h * r.stride], want_score[h]);
      EXPECT_EQ(r.scores[h * r.stride + 1], kScoreSentinel);  // column s_kv left untouched
    }
  }
}

TEST(RefMlaDecode, TwoKeysWithKnownScores) {
  // Keys k0 = [2, -1 | 0], k1 = [4, 3 | 1] and q = [0, 0 | a] with scale 1: scores 0 and a, so
  // p1 = 1 / (1 + e^-a), p0 = 1 / (1 + e^a), out = p0 v0 + p1 v1, lse = ln(1 + e^a).
  // Tolerance: the stored FP32 value is within u32 |want| of the FP64 value; the reference and
  // the closed form each round a handful of FP64 operations (<= 16 u64 of sum p|v| between them).
  const std::vector<std::vector<float>> rows = {{2, -1, 0, 4, 3, 1}};
  const float a[3] = {1.0f, -2.0f, 0.125f};
  const std::vector<float> q = {0, 0, a[0], 0, 0, a[1], 0, 0, a[2]};  // [s_q 1, h_q 3, 3]
  PagedKv kv = make_paged_kv(rows, 3, 16, 0, 2, true);
  AttnOut r = run_decode(kv, DType::kF32, 1, 3, 2, q, DType::kF32, 1.0f, false);
  const double v0[2] = {2, -1}, v1[2] = {4, 3};
  for (int h = 0; h < 3; ++h) {
    const double p0 = 1 / (1 + std::exp(double(a[h]))), p1 = 1 / (1 + std::exp(-double(a[h])));
    for (int c = 0; c < 2; ++c) {
      const double want = p0 * v0[c] + p1 * v1[c];
      const double mag = p0 * std::abs(v0[c]) + p1 * std::abs(v1[c]);
      EXPECT_NEAR(r.out[h * 2 + c], want, kU32 * std::abs(want) + 16 * kU64 * mag) << h;
    }
    const double want_lse = std::log1p(std::exp(double(a[h])));
    EXPECT_NEAR(r.lse[h], want_lse, kU32 * std::abs(want_lse) + 16 * kU64 * (1 + std::abs(a[h])));
    EXPECT_EQ(r.scores[h * r.stride + 0], 0.0f);  // both logits are exact
    EXPECT_EQ(r.scores[h * r.stride + 1], a[h]);
  }
}

// Causal row s must equal a non-causal run over only its visible keys: the same FP64 operations
// on the same values, so bit-for-bit. Also checks the -inf / untouched pattern of the scores.
void check_causal_equals_truncated(int s_q, int s_kv, int page_size, uint64_t seed) {
  const int h_q = 3, d_v = 8, d_qk = 12;
  Rng rng(seed);
  const std::vector<float> rows = random_bf16_values(rng, size_t(s_kv) * d_qk);
  const std::vector<float> q = random_bf16_values(rng, size_t(s_q) * h_q * d_qk);
  const float scale = 0.3f;
  PagedKv kv = make_paged_kv({rows}, d_qk, page_size, 1, seed, true);
  AttnOut causal = run_decode(kv, DType::kBF16, s_q, h_q, d_v, q, DType::kF32, scale, true);
  for (int s = 0; s < s_q; ++s) {
    const int n = visible_keys(s_kv, s_q, s, true);
    for (int h = 0; h < h_q; ++h) {
      const float* sc = &causal.scores[(size_t(s) * h_q + h) * causal.stride];
      for (int t = 0; t < causal.stride; ++t) {
        if (t >= s_kv)
          EXPECT_EQ(sc[t], kScoreSentinel) << s << " " << t;
        else if (t >= n)
          EXPECT_EQ(sc[t], -kInfF) << s << " " << t;
        else
          EXPECT_TRUE(std::isfinite(sc[t])) << s << " " << t;
      }
    }
    if (n <= 0) continue;  // empty rows are checked in their own tests
    std::vector<float> prefix(rows.begin(), rows.begin() + size_t(n) * d_qk);
    std::vector<float> q_row(q.begin() + size_t(s) * h_q * d_qk,
                             q.begin() + size_t(s + 1) * h_q * d_qk);
    PagedKv kv_n = make_paged_kv({prefix}, d_qk, page_size, 0, seed + 1, true);
    AttnOut full = run_decode(kv_n, DType::kBF16, 1, h_q, d_v, q_row, DType::kF32, scale, false);
    for (int h = 0; h < h_q; ++h) {
      for (int c = 0; c < d_v; ++c)
        EXPECT_EQ(causal.out[(size_t(s) * h_q + h) * d_v + c], full.out[h * d_v + c])
            << "s " << s << " h " << h << " c " << c;
      EXPECT_EQ(causal.lse[size_t(h) * s_q + s], full.lse[h]) << "s " << s << " h " << h;
    }
    if (n == 1) {  // one key: out is that key's V exactly
      for (int h = 0; h < h_q; ++h)
        for (int c = 0; c < d_v; ++c)
          EXPECT_EQ(causal.out[(size_t(s) * h_q + h) * d_v + c], rows[c]);
    }
  }
}

TEST(RefMlaDecode, CausalSquareQuery0SeesOneKey) {
  check_causal_equals_truncated(3, 3, 2, 3);
}
TEST(RefMlaDecode, CausalAcrossPageBoundaries) {
  check_causal_equals_truncated(4, 37, 16, 4);
  check_causal_equals_truncated(2, 17, 16, 5);  // one past a page boundary
}

TEST(RefMlaDecode, CausalShorterContextLeavesLeadingRowsEmpty) {
  // s_q 4, s_kv 2: visible keys per row = 2 - 4 + s + 1 = -1, 0, 1, 2.
  const int s_q = 4, h_q = 2, d_qk = 6, d_v = 4;
  Rng rng(6);
  const std::vector<float> rows = random_bf16_values(rng, size_t(2) * d_qk);
  const std::vector<float> q = random_bf16_values(rng, size_t(s_q) * h_q * d_qk);
  PagedKv kv = make_paged_kv({rows}, d_qk, 4, 1, 6, true);
  AttnOut r = run_decode(kv, DType::kBF16, s_q, h_q, d_v, q, DType::kF32, 0.25f, true);
  for (int s = 0; s < 2; ++s)
    for (int h = 0; h < h_q; ++h) {
      for (int c = 0; c < d_v; ++c) EXPECT_EQ(r.out[(size_t(s) * h_q + h) * d_v + c], 0.0f);
      EXPECT_EQ(r.lse[size_t(h) * s_q + s], kInfF);
      const float* sc = &r.scores[(size_t(s) * h_q + h) * r.stride];
      EXPECT_EQ(sc[0], -kInfF);
      EXPECT_EQ(sc[1], -kInfF);
      EXPECT_EQ(sc[2], kScoreSentinel);
    }
  for (int h = 0; h < h_q; ++h)  // row 2 sees key 0 only
    for (int c = 0; c < d_v; ++c) EXPECT_EQ(r.out[(size_t(2) * h_q + h) * d_v + c], rows[c]);
  check_causal_equals_truncated(4, 2, 4, 6);  // rows 2 and 3 against truncated runs
}

TEST(RefMlaDecode, EmptySequenceGivesZeroAndInfiniteLse) {
  // Sequences 0 and 2 have s_kv = 0; sequence 1 must be unaffected by its neighbours.
  const int s_q = 2, h_q = 2, d_qk = 6, d_v = 4;
  Rng rng(7);
  const std::vector<float> rows1 = random_bf16_values(rng, size_t(5) * d_qk);
  const std::vector<float> q = random_bf16_values(rng, size_t(3) * s_q * h_q * d_qk);
  const size_t per_seq = size_t(s_q) * h_q * d_qk;
  for (bool causal : {false, true}) {
    PagedKv kv = make_paged_kv({{}, rows1, {}}, d_qk, 4, 1, 7, true);
    AttnOut r = run_decode(kv, DType::kBF16, s_q, h_q, d_v, q, DType::kF32, 0.5f, causal);
    for (int b : {0, 2}) {
      for (int i = 0; i < s_q * h_q * d_v; ++i)
        EXPECT_EQ(r.out[size_t(b) * s_q * h_q * d_v + i], 0.0f);
      for (int i = 0; i < h_q * s_q; ++i) EXPECT_EQ(r.lse[size_t(b) * h_q * s_q + i], kInfF);
      for (int i = 0; i < s_q * h_q * r.stride; ++i)  // s_kv = 0: no column is written
        EXPECT_EQ(r.scores[size_t(b) * s_q * h_q * r.stride + i], kScoreSentinel);
    }
    PagedKv kv1 = make_paged_kv({rows1}, d_qk, 4, 0, 8, true);
    std::vector<float> q1(q.begin() + per_seq, q.begin() + 2 * per_seq);
    AttnOut r1 = run_decode(kv1, DType::kBF16, s_q, h_q, d_v, q1, DType::kF32, 0.5f, causal);
    std::vector<float> out_b1(r.out.begin() + s_q * h_q * d_v, r.out.begin() + 2 * s_q * h_q * d_v);
    std::vector<float> lse_b1(r.lse.begin() + h_q * s_q, r.lse.begin() + 2 * h_q * s_q);
    EXPECT_TRUE(same_bits(out_b1, r1.out));
    EXPECT_TRUE(same_bits(lse_b1, r1.lse));
  }
}

TEST(RefMlaDecode, PoisonedSlotsAndTableEntriesAreNeverRead) {
  // NaN in every slot past cache_seqlens and in spare pages, -1 / INT32_MAX / past-the-end in
  // unused table entries: the results must be bit-identical to a clean cache (a read of NaN would
  // propagate, a read through a bad entry trips the reference's block check or ASan).
  const int s_q = 2, h_q = 3, d_qk = 24, d_v = 16;
  Rng rng(9);
  std::vector<std::vector<float>> rows;
  for (int s_kv : {37, 16, 1}) rows.push_back(random_bf16_values(rng, size_t(s_kv) * d_qk));
  const std::vector<float> q = random_bf16_values(rng, size_t(3) * s_q * h_q * d_qk);
  for (bool causal : {false, true}) {
    PagedKv clean = make_paged_kv(rows, d_qk, 16, 2, 10, false);
    PagedKv dirty = make_paged_kv(rows, d_qk, 16, 2, 10, true);
    AttnOut a = run_decode(clean, DType::kBF16, s_q, h_q, d_v, q, DType::kF32, 0.2f, causal);
    AttnOut b = run_decode(dirty, DType::kBF16, s_q, h_q, d_v, q, DType::kF32, 0.2f, causal);
    EXPECT_TRUE(same_bits(a.out, b.out));
    EXPECT_TRUE(same_bits(a.lse, b.lse));
    EXPECT_TRUE(same_bits(a.scores, b.scores));
    for (float x : b.out) ASSERT_TRUE(std::isfinite(x));
    for (float x : b.lse) ASSERT_FALSE(std::isnan(x));  // +inf where causal leaves a row empty
    bool any_nonzero = false;
    for (float x : b.out) any_nonzero |= x != 0.0f;
    EXPECT_TRUE(any_nonzero);
  }
}

TEST(RefMlaDecode, Bf16AndF32StorageGiveTheSameAnswer) {
  // Every value is BF16-representable, and both dtypes widen exactly to the same FP64 numbers:
  // the four dtype combinations must agree bit for bit.
  const int s_q = 2, h_q = 3, d_qk = 24, d_v = 16;
  Rng rng(11);
  std::vector<std::vector<float>> rows;
  for (int s_kv : {20, 33}) rows.push_back(random_bf16_values(rng, size_t(s_kv) * d_qk));
  const std::vector<float> q = random_bf16_values(rng, size_t(2) * s_q * h_q * d_qk);
  PagedKv kv = make_paged_kv(rows, d_qk, 16, 1, 12, true);
  AttnOut base = run_decode(kv, DType::kBF16, s_q, h_q, d_v, q, DType::kBF16, 0.2f, true);
  for (DType kv_t : {DType::kBF16, DType::kF32})
    for (DType q_t : {DType::kBF16, DType::kF32}) {
      AttnOut r = run_decode(kv, kv_t, s_q, h_q, d_v, q, q_t, 0.2f, true);
      EXPECT_TRUE(same_bits(r.out, base.out)) << dtype_name(kv_t) << " " << dtype_name(q_t);
      EXPECT_TRUE(same_bits(r.lse, base.lse)) << dtype_name(kv_t) << " " << dtype_name(q_t);
      EXPECT_TRUE(same_bits(r.scores, base.scores)) << dtype_name(kv_t) << " " << dtype_name(q_t);
    }
}

TEST(RefMlaDecode, LseNormalisesTheScores) {
  // sum_t exp(score_t - lse) = 1 in exact arithmetic. score_t and lse are each stored in FP32
  // (|error| <= u32 |x|), so every term is off by a factor within exp(+-D) with
  // D = u32 max_t(|score_t| + |lse|), and the sum by at most expm1(D) (+ FP64 noise, 1e-13).
  const int s_q = 3, h_q = 4, d_qk = 40, d_v = 32, s_kv = 50;
  Rng rng(13);
  const std::vector<float> rows = random_bf16_values(rng, size_t(s_kv) * d_qk);
  const std::vector<float> q = random_bf16_values(rng, size_t(s_q) * h_q * d_qk, 2.0);
  PagedKv kv = make_paged_kv({rows}, d_qk, 16, 0, 14, true);
  AttnOut r = run_decode(kv, DType::kBF16, s_q, h_q, d_v, q, DType::kF32, 0.3f, true);
  for (int s = 0; s < s_q; ++s)
    for (int h = 0; h < h_q; ++h) {
      const double lse = r.lse[size_t(h) * s_q + s];
      const float* sc = &r.scores[(size_t(s) * h_q + h) * r.stride];
      double sum = 0, worst = 0;
      for (int t = 0; t < visible_keys(s_kv, s_q, s, true); ++t) {
        sum += std::exp(double(sc[t]) - lse);
        worst = std::max(worst, std::abs(double(sc[t])) + std::abs(lse));
      }
      EXPECT_NEAR(sum, 1.0, std::expm1(kU32 * worst) + 1e-13) << "s " << s << " h " << h;
    }
}

}  // namespace
}  // namespace mla::ref
