#include "model/model_rope.h"

#include <cmath>

namespace mla {

double longrope_attention(const RopeScalingConfig& y) {
  if (y.attention_factor > 0) return y.attention_factor;
  if (y.factor <= 1.0) return 1.0;
  return std::sqrt(1.0 + std::log(y.factor) / std::log(double(y.original_max_position_embeddings)));
}

RopeConfig rope_config_of(const ModelConfig& c, int64_t max_context) {
  RopeConfig r;
  r.dim = c.qk_rope_head_dim;
  r.theta = c.rope_theta;
  r.layout = c.neox_rope() ? RopeLayout::kNeox : RopeLayout::kInterleaved;
  const RopeScalingConfig& y = c.rope_scaling;
  if (y.type == RopeScalingType::kLongrope) {
    const bool long_ctx = max_context > y.original_max_position_embeddings;
    r.scaling.longrope_ext = long_ctx ? y.long_factor : y.short_factor;
    r.scaling.longrope_attention = longrope_attention(y);
  } else if (y.type == RopeScalingType::kYarn) {
    r.scaling.yarn = true;
    r.scaling.factor = y.factor;
    r.scaling.original_max_position = double(y.original_max_position_embeddings);
    r.scaling.beta_fast = y.beta_fast;
    r.scaling.beta_slow = y.beta_slow;
    r.scaling.mscale = y.mscale;
    r.scaling.mscale_all_dim = y.mscale_all_dim;
  }
  return r;
}

}  // namespace mla
