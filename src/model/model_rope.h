// The RoPE a model's config asks for, as the kernels see it (kernels/rope_params.h): pair layout,
// YaRN or LongRoPE numbers. Kept apart from model_config so that the parser stays about JSON.
#pragma once

#include <cstdint>

#include "kernels/rope_params.h"
#include "model/model_config.h"

namespace mla {

// LongRoPE's cos / sin factor (transformers' _compute_longrope_parameters): attention_factor when
// the config gives it, else 1 for factor <= 1, else sqrt(1 + ln(factor) / ln(original)).
// Validation refuses a config for which this is not a finite positive number.
double longrope_attention(const RopeScalingConfig& y);

// DeepSeek checkpoints rotate interleaved pairs, MiniCPM3's NeoX pairs (docs/kernels/rope.md §The
// rotation; docs/MODELS.md §MiniCPM3). max_context: the positions the table serves. LongRoPE takes
// its long factors when that passes original_max_position_embeddings, at every position;
// transformers switches per sequence by its current length, so the two agree below that length only
// with the short factors (MiniCPM3: original = max_position_embeddings, so always the short ones).
RopeConfig rope_config_of(const ModelConfig& c, int64_t max_context);

}  // namespace mla
