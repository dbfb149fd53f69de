// Tests of the reference RoPE / YaRN: worked values from docs/kernels/rope.md (§The two mscales,
// §Worked values), and the rotation's algebraic properties (layout permutation, norm, identity at
// 0, relative positions).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <numbers>
#include <vector>

#include "core/rng.h"
#include "kernels/ref/mla_ref.h"

namespace mla::ref {
namespace {

// FP32 unit roundoff: one FP64 -> FP32 store moves a value by at most u relative.
constexpr double kU32 = 0x1.0p-24;
// FP64 unit roundoff.
constexpr double kU64 = 0x1.0p-53;

RopeConfig yarn_config(double theta, double factor, double beta_fast, double beta_slow,
                       double mscale, double mscale_all_dim) {
  RopeConfig cfg;
  cfg.dim = 64;
  cfg.theta = theta;
  cfg.scaling.yarn = true;
  cfg.scaling.factor = factor;
  cfg.scaling.original_max_position = 4096;
  cfg.scaling.beta_fast = beta_fast;
  cfg.scaling.beta_slow = beta_slow;
  cfg.scaling.mscale = mscale;
  cfg.scaling.mscale_all_dim = mscale_all_dim;
  return cfg;
}
RopeConfig v3_config() {
  return yarn_config(10000, 40, 32, 1, 1.0, 1.0);
}
RopeConfig v2_config() {
  return yarn_config(10000, 40, 32, 1, 0.707, 0.707);
}
RopeConfig k2_config() {
  return yarn_config(50000, 32, 1, 1, 1.0, 1.0);
}

// The worked tables print 10 significant digits: rounding to them moves a value by at most half a
// unit in the 10th digit, i.e. <= 5e-10 relative for a leading digit of 1 (less otherwise). The
// FP64 computation adds ~1e-15. Hence a relative tolerance of 1e-9.
constexpr double kTenDigitRel = 1e-9;
const int kWorkedIdx[8] = {0, 5, 10, 11, 16, 22, 23, 31};

TEST(RopeInvFreq, DeepSeekV3WorkedValues) {
  const double want[8] = {1.0,
                          2.371373706e-1,
                          5.623413252e-2,
                          3.900692657e-2,
                          5.500000000e-3,
                          1.778279410e-4,
                          3.333803580e-5,
                          3.333803580e-6};
  for (const RopeConfig& cfg : {v3_config(), v2_config()}) {  // mscale does not enter inv_freq
    std::vector<double> f = rope_inv_freq(cfg);
    ASSERT_EQ(f.size(), 32u);
    for (int k = 0; k < 8; ++k)
      EXPECT_NEAR(f[kWorkedIdx[k]], want[k], kTenDigitRel * want[k]) << "i=" << kWorkedIdx[k];
  }
}

TEST(RopeInvFreq, KimiK2WorkedValues) {
  const double want[8] = {1.0,
                          1.844106238e-1,
                          3.400727816e-2,
                          2.425096702e-2,
                          4.472135955e-3,
                          1.837841879e-5,
                          1.310585417e-5,
                          8.764412912e-7};
  std::vector<double> f = rope_inv_freq(k2_config());
  ASSERT_EQ(f.size(), 32u);
  for (int k = 0; k < 8; ++k)
    EXPECT_NEAR(f[kWorkedIdx[k]], want[k], kTenDigitRel * want[k]) << "i=" << kWorkedIdx[k];
}

TEST(RopeInvFreq, CorrectionDimsAndRampEnds) {
  // The table prints corr_dim to 6 decimals: |error| <= 5e-7, plus FP64 noise.
  constexpr double kSixDecimals = 5e-7 + 1e-12;
  EXPECT_NEAR(yarn_correction_dim(64, 10000, 4096, 32), 10.472241, kSixDecimals);
  EXPECT_NEAR(yarn_correction_dim(64, 10000, 4096, 1), 22.513441, kSixDecimals);
  EXPECT_NEAR(yarn_correction_dim(64, 50000, 4096, 1), 19.164575, kSixDecimals);
  // low / high are whole numbers after floor / ceil: exact.
  YarnRampRange v3 = yarn_ramp_range(v3_config());
  EXPECT_EQ(v3.low, 10.0);
  EXPECT_EQ(v3.high, 23.0);
  YarnRampRange k2 = yarn_ramp_range(k2_config());  // beta 1/1: floor and ceil of the same value
  EXPECT_EQ(k2.low, 19.0);
  EXPECT_EQ(k2.high, 20.0);
}

TEST(RopeInvFreq, DegenerateRampGetsWidened) {
  // n slightly above L0 / (2 pi) puts corr_dim just below 0 for both betas: low = max(-1, 0) = 0,
  // high = ceil(-0.03) = 0, equal, so high becomes 0.001 and the ramp is a step after pair 0.
  RopeConfig cfg = v3_config();
  const double n = 4096 / (2 * std::numbers::pi) * 1.01;
  cfg.scaling.beta_fast = cfg.scaling.beta_slow = n;
  YarnRampRange range = yarn_ramp_range(cfg);
  EXPECT_EQ(range.low, 0.0);
  EXPECT_EQ(range.high, 0.001);
  std::vector<double> f = rope_inv_freq(cfg);
  EXPECT_EQ(f[0], 1.0);
  // ramp = 1 exactly for i >= 1: the value is theta^(-2i/d) / s up to the blend's rounding
  // (extra * 0 + inter * 1 is exact), so equality with the same expression holds.
  for (int i = 1; i < 32; ++i) EXPECT_EQ(f[i], std::pow(10000.0, -2.0 * i / 64) / 40.0) << i;
}

TEST(RopeInvFreq, PlainRopeWithoutYarn) {
  RopeConfig cfg;
  cfg.dim = 64;
  cfg.theta = 50000;  // Moonlight: no rope_scaling
  std::vector<double> f = rope_inv_freq(cfg);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(f[i], std::pow(50000.0, -2.0 * i / 64)) << i;
}

// MiniCPM3's LongRoPE: pair i's frequency divided by ext[i], cos / sin times the attention factor.
TEST(RopeInvFreq, LongropeDividesEachPair) {
  RopeConfig cfg;
  cfg.dim = 8;
  cfg.theta = 10000;
  cfg.layout = RopeLayout::kNeox;
  cfg.scaling.longrope_ext = {1.0, 1.25, 2.5, 7.0};
  cfg.scaling.longrope_attention = 1.19;
  const std::vector<double> f = rope_inv_freq(cfg);
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(f[size_t(i)], std::pow(10000.0, -2.0 * i / 8) / cfg.scaling.longrope_ext[size_t(i)])
        << i;
  EXPECT_EQ(rope_attention_factor(cfg), 1.19);
  EXPECT_EQ(mla_softmax_scale(96, cfg.scaling), 1.0 / std::sqrt(96.0));  // no m² without YaRN

  // At position 3, NeoX pair (1, 5) turns by 3 · f[1], lengths scaled by 1.19.
  std::vector<float> x = {0, 1, 0, 0, 0, 0, 0, 0};
  const int64_t pos = 3;
  rope_apply(cfg, &pos, 1, 1, x.data());
  // rope_apply computes 1 · c - 0 · s in FP64 as this expectation does and rounds once to FP32:
  // at most half an ulp of a value below 2, 2^-24.
  const double half_ulp = std::ldexp(1.0, -24);
  EXPECT_NEAR(x[1], 1.19 * std::cos(3 * f[1]), half_ulp);
  EXPECT_NEAR(x[5], 1.19 * std::sin(3 * f[1]), half_ulp);
}

TEST(RopeMscale, WorkedValues) {
  // m values of docs/kernels/rope.md §The two mscales, printed to 10 significant digits.
  EXPECT_NEAR(yarn_get_mscale(40, 0.707), 1.260803777, kTenDigitRel);
  EXPECT_NEAR(yarn_get_mscale(40, 1.0), 1.368887945, kTenDigitRel);
  EXPECT_NEAR(yarn_get_mscale(32, 1.0), 1.346573590, kTenDigitRel);
  EXPECT_NEAR(yarn_get_mscale(64, 1.0), 1.415888308, kTenDigitRel);
  EXPECT_EQ(yarn_get_mscale(1.0, 1.0), 1.0);  // s <= 1: no scaling at all
  EXPECT_EQ(yarn_get_mscale(0.5, 1.0), 1.0);
}

TEST(RopeMscale, SoftmaxScaleTable) {
  // docs/kernels/rope.md §The two mscales prints the scales to 9 decimals: |error| <= 5e-10, plus
  // ~1e-16 from FP64.
  constexpr double kNineDecimals = 5e-10 + 1e-15;
  EXPECT_NEAR(mla_softmax_scale(192, v2_config().scaling), 0.114721387, kNineDecimals);
  EXPECT_NEAR(mla_softmax_scale(192, v3_config().scaling), 0.135233779, kNineDecimals);
  EXPECT_NEAR(mla_softmax_scale(192, k2_config().scaling), 0.130860800, kNineDecimals);
  RopeScaling k2_0905 = k2_config().scaling;
  k2_0905.factor = 64;
  EXPECT_NEAR(mla_softmax_scale(192, k2_0905), 0.144679626, kNineDecimals);
  EXPECT_NEAR(mla_softmax_scale(192, RopeScaling{}), 0.072168784, kNineDecimals);  // Moonlight
  EXPECT_NEAR(mla_softmax_scale(96, RopeScaling{}), 0.102062073, kNineDecimals);   // MiniCPM3
  // YaRN without mscale_all_dim leaves the softmax scale alone.
  RopeScaling no_all_dim = v3_config().scaling;
  no_all_dim.mscale_all_dim = 0;
  EXPECT_EQ(mla_softmax_scale(192, no_all_dim), 1.0 / std::sqrt(192.0));
}

TEST(RopeMscale, AttentionFactor) {
  // mscale == mscale_all_dim: the same function on the same arguments, x / x == 1.0 exactly.
  EXPECT_EQ(rope_attention_factor(v2_config()), 1.0);
  EXPECT_EQ(rope_attention_factor(v3_config()), 1.0);
  EXPECT_EQ(rope_attention_factor(k2_config()), 1.0);
  EXPECT_EQ(rope_attention_factor(RopeConfig{}), 1.0);  // no YaRN
  // Generic YaRN (mscale_all_dim absent): g(s, 1) / g(s, 0) = 0.1 ln s + 1.
  EXPECT_NEAR(rope_attention_factor(yarn_config(10000, 40, 32, 1, 1.0, 0.0)), 1.368887945,
              kTenDigitRel);
}

// ---- rope_apply ----

std::vector<float> random_vec(Rng& rng, size_t n) {
  std::vector<float> v(n);
  for (float& x : v) x = float(rng.normal());
  return v;
}

const int64_t kPositions[] = {0, 1, 2, 7, 63, 4095, 4096, 32768, 163839, 1000000};
constexpr int kNumPositions = sizeof(kPositions) / sizeof(kPositions[0]);

TEST(RopeApply, InterleavedEqualsNeoxOnDeinterleaved) {
  // docs/kernels/rope.md §The rotation: NeoX applied to x' = [x0, x2, ..., x1, x3, ...] gives
  // y'[j] = y[2j], y'[d/2+j] = y[2j+1].
  // The reference does the same FP64 operations on the same operands for both layouts, so the
  // results agree exactly, not just within rounding.
  Rng rng(11);
  const int heads = 3;
  for (RopeConfig cfg : {v3_config(), k2_config(), RopeConfig{}}) {
    const int d = cfg.dim, half = d / 2;
    std::vector<float> x = random_vec(rng, size_t(kNumPositions) * heads * d);
    std::vector<float> xd(x.size());  // de-interleaved copy
    for (size_t row = 0; row < x.size() / d; ++row)
      for (int j = 0; j < half; ++j) {
        xd[row * d + j] = x[row * d + 2 * j];
        xd[row * d + half + j] = x[row * d + 2 * j + 1];
      }
    cfg.layout = RopeLayout::kInterleaved;
    rope_apply(cfg, kPositions, kNumPositions, heads, x.data());
    cfg.layout = RopeLayout::kNeox;
    rope_apply(cfg, kPositions, kNumPositions, heads, xd.data());
    for (size_t row = 0; row < x.size() / d; ++row)
      for (int j = 0; j < half; ++j) {
        EXPECT_EQ(xd[row * d + j], x[row * d + 2 * j]) << "row " << row << " pair " << j;
        EXPECT_EQ(xd[row * d + half + j], x[row * d + 2 * j + 1]) << "row " << row << " pair " << j;
      }
  }
}

// |y_pair| for pair i of one [dim] vector in either layout.
double pair_norm(const RopeConfig& cfg, const float* v, int i) {
  const bool il = cfg.layout == RopeLayout::kInterleaved;
  const double a = v[il ? 2 * i : i], b = v[il ? 2 * i + 1 : i + cfg.dim / 2];
  return std::sqrt(a * a + b * b);
}

TEST(RopeApply, RotationPreservesEachPairNorm) {
  // In FP64 the rotation scales a pair's norm by af * (cos^2 + sin^2)^(1/2) = af * (1 +- 4 u64).
  // Storing each coordinate in FP32 changes it by <= u32 relative, so the stored pair's norm is
  // within u32 relative of the FP64 one: |n_y - af n_x| <= (u32 + 8 u64) af n_x.
  Rng rng(12);
  RopeConfig generic = yarn_config(10000, 40, 32, 1, 1.0, 0.0);  // af = 0.1 ln 40 + 1
  for (RopeConfig cfg : {v3_config(), k2_config(), generic}) {
    for (RopeLayout layout : {RopeLayout::kInterleaved, RopeLayout::kNeox}) {
      cfg.layout = layout;
      const double af = rope_attention_factor(cfg);
      const int d = cfg.dim;
      std::vector<float> x = random_vec(rng, size_t(kNumPositions) * 2 * d);
      std::vector<float> y = x;
      rope_apply(cfg, kPositions, kNumPositions, 2, y.data());
      for (size_t row = 0; row < x.size() / d; ++row)
        for (int i = 0; i < d / 2; ++i) {
          const double nx = af * pair_norm(cfg, &x[row * d], i);
          EXPECT_NEAR(pair_norm(cfg, &y[row * d], i), nx, (kU32 + 8 * kU64) * nx)
              << "row " << row << " pair " << i;
        }
    }
  }
}

TEST(RopeApply, PositionZeroIsIdentity) {
  // angle 0: cos = 1 and sin = 0 exactly, af = 1.0 exactly, so y = x bit for bit.
  Rng rng(13);
  for (RopeConfig cfg : {v3_config(), k2_config(), RopeConfig{}}) {
    for (RopeLayout layout : {RopeLayout::kInterleaved, RopeLayout::kNeox}) {
      cfg.layout = layout;
      std::vector<float> x = random_vec(rng, size_t(4) * cfg.dim);
      std::vector<float> y = x;
      const int64_t zero[1] = {0};
      rope_apply(cfg, zero, 1, 4, y.data());
      for (size_t k = 0; k < x.size(); ++k) EXPECT_EQ(y[k], x[k]) << k;
    }
  }
}

TEST(RopeApply, DotProductDependsOnlyOnPositionDifference) {
  // R(m)q . R(n)k = q . R(n - m)k in exact arithmetic. Error of one rotated, stored dot product:
  //  - FP32 storage: each stored coordinate is off by <= u32 relative, so each product term is
  //    off by <= (2 u32 + u32^2)|q_c||k_c|; summed, <= (2 u32 + u32^2) sum_pairs |q_p||k_p| (by
  //    Cauchy-Schwarz within a pair, and rotation preserving pair norms).
  //  - the angle p * inv_freq in FP64 is off by <= p * inv_freq * u64 <= p * u64 (inv_freq <= 1),
  //    and cos / sin by ~1 ulp more: each rotated pair moves by <= (p + 4) u64 |x_p|.
  //  - the FP64 dot itself: d * u64 relative of sum |q_c||k_c|.
  // Two such dot products are compared, so the bound is twice the sum of the terms.
  Rng rng(14);
  for (RopeConfig cfg : {v3_config(), k2_config()}) {
    for (RopeLayout layout : {RopeLayout::kInterleaved, RopeLayout::kNeox}) {
      cfg.layout = layout;
      const int d = cfg.dim;
      const std::vector<float> q = random_vec(rng, d), k = random_vec(rng, d);
      double pair_sum = 0;  // sum_pairs |q_p||k_p| of the unrotated vectors
      for (int i = 0; i < d / 2; ++i)
        pair_sum += pair_norm(cfg, q.data(), i) * pair_norm(cfg, k.data(), i);

      auto rotated_dot = [&](int64_t pq, int64_t pk) {
        std::vector<float> qr = q, kr = k;
        rope_apply(cfg, &pq, 1, 1, qr.data());
        rope_apply(cfg, &pk, 1, 1, kr.data());
        double dot = 0;
        for (int c = 0; c < d; ++c) dot += double(qr[c]) * double(kr[c]);
        return dot;
      };
      const int64_t deltas[] = {0, 1, 17, 5000};
      for (int64_t delta : deltas) {
        const double base = rotated_dot(100, 100 + delta);
        for (int64_t shift : {int64_t(1), int64_t(999), int64_t(150000)}) {
          const double pmax = double(100 + delta + shift);
          const double one_dot =
              (2 * kU32 + kU32 * kU32 + (pmax + 4) * 2 * kU64 + d * kU64) * pair_sum;
          EXPECT_NEAR(rotated_dot(100 + shift, 100 + delta + shift), base, 2 * one_dot)
              << "delta " << delta << " shift " << shift;
        }
      }
    }
  }
}

}  // namespace
}  // namespace mla::ref
