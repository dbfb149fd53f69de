// The FP32 RoPE of the fast path against the FP64 reference rotation (kernels/ref), for the YaRN
// configs of DeepSeek-V3 and Kimi-K2, plain RoPE, and both pair layouts, at positions up to 160K.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/rng.h"
#include "kernels/ref/mla_ref.h"
#include "kernels/rope_table.h"

namespace mla {
namespace {

RopeConfig config(double theta, bool yarn, double factor, double beta_fast, RopeLayout layout) {
  RopeConfig c;
  c.dim = 64;
  c.theta = theta;
  c.layout = layout;
  c.scaling.yarn = yarn;
  c.scaling.factor = factor;
  c.scaling.beta_fast = beta_fast;
  c.scaling.beta_slow = 1.0;
  c.scaling.mscale = 1.0;
  c.scaling.mscale_all_dim = 1.0;
  return c;
}

TEST(RopeCpu, MatchesTheFp64ReferenceWithinFp32Rounding) {
  const std::vector<RopeConfig> configs = {
      config(10000, true, 40, 32, RopeLayout::kInterleaved),  // DeepSeek-V3
      config(50000, true, 32, 1, RopeLayout::kInterleaved),   // Kimi-K2
      config(50000, false, 1, 32, RopeLayout::kInterleaved),  // Moonlight (no YaRN)
      config(10000, false, 1, 32, RopeLayout::kNeox),         // MiniCPM3-style layout
  };
  const int heads = 3, d_n = 16, stride = d_n + 64;  // q rows: [q_nope (16) | q_pe (64)]
  const std::vector<int64_t> positions = {0, 1, 2, 7, 4095, 4096, 65535, 163839};
  Rng rng(9);
  for (const RopeConfig& cfg : configs) {
    auto table = make_rope_table(cfg, 163840);
    ASSERT_TRUE(table.ok()) << table.status().to_string();
    const int n = int(positions.size());
    std::vector<float> x(size_t(n) * heads * stride);
    for (auto& v : x) v = float(rng.normal());
    std::vector<float> got = x, want(size_t(n) * heads * 64);
    for (int t = 0; t < n; ++t)
      for (int h = 0; h < heads; ++h)
        for (int c = 0; c < 64; ++c)
          want[(size_t(t) * heads + h) * 64 + c] = x[(size_t(t) * heads + h) * stride + d_n + c];
    ASSERT_TRUE(rope_apply_f32(*table, positions.data(), n, heads, stride, d_n, got.data()).ok());
    ref::rope_apply(cfg, positions.data(), n, heads, want.data());
    // Per element: cos and sin are FP64 values stored in FP32 (relative error u = 2^-24), each
    // product and the sum round once more, and the reference's FP32 output rounds once:
    // |Δ| ≤ 3u·(|x_a| + |x_b|)·factor + u·|y| ≤ 4u·(|x_a| + |x_b|) with factor 1.
    const double u = std::ldexp(1.0, -24);
    const int half = 32;
    for (int t = 0; t < n; ++t)
      for (int h = 0; h < heads; ++h) {
        const float* in = &x[(size_t(t) * heads + h) * stride + d_n];
        for (int i = 0; i < half; ++i) {
          const bool il = cfg.layout == RopeLayout::kInterleaved;
          const int a = il ? 2 * i : i, b = il ? 2 * i + 1 : i + half;
          const double bound = 4 * u * (std::fabs(in[a]) + std::fabs(in[b]));
          for (int k : {a, b}) {
            const float g = got[(size_t(t) * heads + h) * stride + d_n + k];
            const float w = want[(size_t(t) * heads + h) * 64 + k];
            ASSERT_LE(std::fabs(double(g) - w), bound)
                << "pos " << positions[t] << " head " << h << " ch " << k;
          }
        }
        // q_nope is untouched.
        for (int c = 0; c < d_n; ++c)
          ASSERT_EQ(got[(size_t(t) * heads + h) * stride + c],
                    x[(size_t(t) * heads + h) * stride + c]);
      }
  }
}

TEST(RopeCpu, BadArgumentsAreErrors) {
  const RopeConfig cfg = config(10000, true, 40, 32, RopeLayout::kInterleaved);
  EXPECT_FALSE(make_rope_table(cfg, 0).ok());
  RopeConfig odd = cfg;
  odd.dim = 63;
  EXPECT_FALSE(make_rope_table(odd, 16).ok());
  auto table = make_rope_table(cfg, 16);
  ASSERT_TRUE(table.ok());
  std::vector<float> x(64);
  const int64_t past = 16, negative = -1;
  const Status s = rope_apply_f32(*table, &past, 1, 1, 64, 0, x.data());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("position 16"), std::string::npos) << s.message();
  EXPECT_FALSE(rope_apply_f32(*table, &negative, 1, 1, 64, 0, x.data()).ok());
  const int64_t zero = 0;
  EXPECT_FALSE(rope_apply_f32(*table, &zero, 1, 1, 63, 0, x.data()).ok());  // row too short
}

}  // namespace
}  // namespace mla
