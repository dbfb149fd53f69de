// The tensors a DeepSeek-family checkpoint must hold for a given ModelConfig: Hugging Face names,
// exact shapes and roles (docs/MODELS.md §Tensors, §Checkpoint shapes). Pure arithmetic on the
// config; the loader checks files against it and make-tiny writes files from it. No file access
// here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mla/status.h"
#include "model/model_config.h"

namespace mla {

// What a tensor is for; decides which dtypes it may have (only kLinear may be F8_E4M3).
enum class WeightRole {
  kLinear,      // [out, in] projection, y = x · Wᵀ; BF16/F16/F32 or F8_E4M3 with block scales
  kNorm,        // [n] RMSNorm weight
  kEmbedding,   // [vocab, D] embed_tokens / lm_head
  kRouter,      // [E, D] mlp.gate.weight, computed in FP32 by the forward pass
  kRouterBias,  // [E] mlp.gate.e_score_correction_bias (noaux_tc), used in FP32
};

struct ExpectedTensor {
  std::string name;            // e.g. "model.layers.3.self_attn.kv_b_proj.weight"
  std::vector<int64_t> shape;  // [out, in] for linear weights, [n] for norms and biases
  WeightRole role = WeightRole::kLinear;
  int layer = -1;  // decoder layer index; -1 for embed_tokens, model.norm, lm_head
  // The shape in config terms for error messages, e.g. "[H*(d_n+d_v), r]".
  const char* rule = "";
  // Stored as F8_E4M3 in the released FP8 checkpoints (V3, K2): the decoder's linear weights, but
  // not the MTP module's eh_proj (docs/MODELS.md §Checkpoint shapes, §Safetensors and FP8).
  // make-tiny --fp8 quantises exactly these.
  bool fp8_in_release = false;
};

// Every tensor that next-token inference reads, in checkpoint order: embed_tokens, then per layer
// (input_layernorm, attention, post_attention_layernorm, dense MLP or router + experts + shared
// experts), model.norm, lm_head (absent when tie_word_embeddings). FP8 scales are not listed: they
// follow from a weight's dtype (fp8_scale_shape). Cost: one entry per tensor, so callers facing an
// untrusted config compare count_expected_tensors with what the files hold before calling this.
std::vector<ExpectedTensor> expected_tensors(const ModelConfig& config);

// The length of expected_tensors(config), computed without building it (saturates at INT64_MAX).
int64_t count_expected_tensors(const ModelConfig& config);

// The tensors of the multi-token-prediction modules stored after the last decoder layer (V3:
// model.layers.{num_hidden_layers}.*: embed_tokens, enorm, hnorm, eh_proj, a full MoE decoder
// layer, shared_head.norm, shared_head.head), num_nextn_predict_layers of them. Inference skips
// these; make-tiny writes them so that the loader's skipping is exercised.
std::vector<ExpectedTensor> mtp_tensors(const ModelConfig& config);

// The block-scale grid of an F8_E4M3 weight [out, in]: [ceil(out/b0), ceil(in/b1)] with
// (b0, b1) = quantization.weight_block_size (128×128 when the config has none).
std::vector<int64_t> fp8_scale_shape(const ModelConfig& config, const std::vector<int64_t>& shape);

// "<weight name>_scale_inv": for "X.weight" the scale is "X.weight_scale_inv" (docs/MODELS.md
// §Safetensors and FP8).
std::string fp8_scale_name(std::string_view weight_name);

// The layer index of "model.layers.<i>.…", or nullopt for other names (and for an index with
// leading zeros or too many digits, which no writer produces).
std::optional<int64_t> layer_index_of(std::string_view tensor_name);

// For one-line error messages: "[4, 8]", and a name in quotes with control bytes escaped and the
// text cut to ~200 bytes, so that a hostile name cannot break or flood the line.
std::string shape_text(const std::vector<int64_t>& shape);
std::string quote_name(std::string_view text);

}  // namespace mla
