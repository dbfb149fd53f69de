// Reference RoPE / YaRN: frequencies, the two mscales and the rotation, all in FP64 (not the fast
// path). Formulas and the source of every number: docs/kernels/rope.md.
#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "core/check.h"
#include "kernels/ref/mla_ref.h"

namespace mla::ref {

double yarn_correction_dim(int dim, double theta, double original_max_position,
                           double n_rotations) {
  return dim * std::log(original_max_position / (2.0 * std::numbers::pi * n_rotations)) /
         (2.0 * std::log(theta));
}

YarnRampRange yarn_ramp_range(const RopeConfig& cfg) {
  const RopeScaling& y = cfg.scaling;
  // floor for the fast end and ceil for the slow end widen the blended band to whole pairs.
  double low =
      std::floor(yarn_correction_dim(cfg.dim, cfg.theta, y.original_max_position, y.beta_fast));
  double high =
      std::ceil(yarn_correction_dim(cfg.dim, cfg.theta, y.original_max_position, y.beta_slow));
  low = std::max(low, 0.0);
  // Clamped to dim - 1 (not dim/2 - 1), as every DeepSeek implementation does.
  high = std::min(high, double(cfg.dim - 1));
  if (low == high) high += 0.001;  // keeps the ramp's denominator non-zero
  return {low, high};
}

std::vector<double> rope_inv_freq(const RopeConfig& cfg) {
  MLA_CHECK(cfg.dim > 0 && cfg.dim % 2 == 0, "rope dim {} must be positive and even", cfg.dim);
  const int half = cfg.dim / 2;
  std::vector<double> inv_freq(half);
  for (int i = 0; i < half; ++i) inv_freq[i] = std::pow(cfg.theta, -2.0 * i / cfg.dim);
  const std::vector<double>& ext = cfg.scaling.longrope_ext;
  if (!ext.empty()) {
    MLA_CHECK(int(ext.size()) == half, "longrope: {} factors for {} pairs", ext.size(), half);
    for (int i = 0; i < half; ++i) inv_freq[i] /= ext[size_t(i)];
  }
  if (!cfg.scaling.yarn) return inv_freq;

  // Pairs below `low` (many turns within L0) keep their frequency; pairs above `high` (less than
  // one turn within L0) are interpolated by 1/s; the band between blends linearly.
  const YarnRampRange range = yarn_ramp_range(cfg);
  for (int i = 0; i < half; ++i) {
    double ramp = std::clamp((i - range.low) / (range.high - range.low), 0.0, 1.0);
    double extra = inv_freq[i];
    double inter = extra / cfg.scaling.factor;
    inv_freq[i] = extra * (1.0 - ramp) + inter * ramp;
  }
  return inv_freq;
}

double yarn_get_mscale(double factor, double mu) {
  return factor <= 1.0 ? 1.0 : 0.1 * mu * std::log(factor) + 1.0;
}

double rope_attention_factor(const RopeConfig& cfg) {
  const RopeScaling& y = cfg.scaling;
  if (!y.longrope_ext.empty()) return y.longrope_attention;
  if (!y.yarn) return 1.0;
  // Both terms go through the same function, so mscale == mscale_all_dim gives x / x == 1.0
  // exactly (every released DeepSeek and Kimi config).
  return yarn_get_mscale(y.factor, y.mscale) / yarn_get_mscale(y.factor, y.mscale_all_dim);
}

double mla_softmax_scale(int d_qk, const RopeScaling& scaling) {
  MLA_CHECK(d_qk > 0, "d_qk {} must be positive", d_qk);
  double scale = 1.0 / std::sqrt(double(d_qk));
  if (scaling.yarn && scaling.mscale_all_dim != 0.0) {
    // m^2 scales the whole logit (nope and rope parts) at every position.
    double m = yarn_get_mscale(scaling.factor, scaling.mscale_all_dim);
    scale *= m * m;
  }
  return scale;
}

void rope_rotate(const RopeConfig& cfg, const int64_t* positions, int n_tokens, int n_heads,
                 int64_t row_stride, int64_t offset, float* x) {
  const std::vector<double> inv_freq = rope_inv_freq(cfg);
  const double attention_factor = rope_attention_factor(cfg);
  const int dim = cfg.dim, half = dim / 2;
  for (int t = 0; t < n_tokens; ++t) {
    for (int i = 0; i < half; ++i) {
      const double angle = double(positions[t]) * inv_freq[i];
      const double c = std::cos(angle) * attention_factor;
      const double s = std::sin(angle) * attention_factor;
      // The two layouts differ only in which coordinates form pair i; the arithmetic is shared so
      // they agree bit for bit up to the permutation.
      const int a = cfg.layout == RopeLayout::kInterleaved ? 2 * i : i;
      const int b = cfg.layout == RopeLayout::kInterleaved ? 2 * i + 1 : i + half;
      for (int h = 0; h < n_heads; ++h) {
        float* v = x + (int64_t(t) * n_heads + h) * row_stride + offset;  // [dim]
        const double xa = v[a], xb = v[b];
        v[a] = float(xa * c - xb * s);
        v[b] = float(xa * s + xb * c);
      }
    }
  }
}

void rope_apply(const RopeConfig& cfg, const int64_t* positions, int n_tokens, int n_heads,
                float* x) {
  rope_rotate(cfg, positions, n_tokens, n_heads, cfg.dim, 0, x);
}

}  // namespace mla::ref
