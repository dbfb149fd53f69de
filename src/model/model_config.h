// ModelConfig: the Hugging Face config.json of a DeepSeek-family MLA model (docs/MODELS.md
// §Configs), its parser and validator (docs/RELIABILITY.md §Checklist R17), and built-in presets of
// the released models. Derived numbers that need more than a line (softmax scale, YaRN) live
// elsewhere.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "mla/status.h"

namespace mla {

enum class RopeScalingType {
  kNone,  // plain RoPE: rope_scaling absent or null, or type "default"
  kYarn,
  kLongrope,  // MiniCPM3: per-pair frequency divisors (docs/kernels/rope.md §LongRoPE)
};

// rope_scaling (or rope_parameters in newer transformers); only read when type is not kNone.
struct RopeScalingConfig {
  RopeScalingType type = RopeScalingType::kNone;
  double factor = 1.0;  // LongRoPE: absent means max_position_embeddings / original
  int64_t original_max_position_embeddings = 4096;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double mscale = 1.0;
  double mscale_all_dim = 0.0;
  // LongRoPE: qk_rope_head_dim / 2 divisors each; the long ones serve contexts beyond
  // original_max_position_embeddings. attention_factor 0: sqrt(1 + ln(factor) / ln(original)),
  // 1 for factor <= 1 (transformers' _compute_longrope_parameters).
  std::vector<double> short_factor, long_factor;
  double attention_factor = 0.0;
};

enum class QuantMethod {
  kNone,  // no quantization_config
  kFp8,   // quant_method "fp8": e4m3 weights with fp32 weight_scale_inv per block
};

struct QuantizationConfig {
  QuantMethod quant_method = QuantMethod::kNone;
  int weight_block_size[2] = {128, 128};  // [rows, cols] of one scale block
  bool scale_fmt_ue8m0 = false;           // scale_fmt "ue8m0" (V3.1): scales are powers of two
};

// Field names are the config.json keys. Optional keys that are absent take the defaults below;
// MoE fields are meaningful only when n_routed_experts > 0.
struct ModelConfig {
  std::string model_type;            // "deepseek_v2", "deepseek_v3", "kimi_k2", ...
  DType torch_dtype = DType::kBF16;  // "bfloat16", "float16" or "float32" (key `dtype` accepted)

  int64_t vocab_size = 0;
  int hidden_size = 0;          // D
  int num_hidden_layers = 0;    // without MTP layers
  int num_attention_heads = 0;  // H
  int q_lora_rank = 0;          // r_q; 0 = no query compression (JSON null, 0 or absent)
  int kv_lora_rank = 0;         // r
  int qk_nope_head_dim = 0;     // d_n
  int qk_rope_head_dim = 0;     // d_r
  int v_head_dim = 0;           // d_v
  int intermediate_size = 0;    // I: dense FFN width

  // MoE (absent or null n_routed_experts: every layer is dense)
  int moe_intermediate_size = 0;  // I_e
  int n_routed_experts = 0;       // E
  int n_shared_experts = 0;       // S
  int num_experts_per_tok = 0;    // K
  int n_group = 1;                // G
  int topk_group = 1;             // G_k
  int first_k_dense_replace = 0;
  int moe_layer_freq = 1;
  double routed_scaling_factor = 1.0;
  bool norm_topk_prob = false;
  std::string scoring_func;  // "softmax" or "sigmoid"; absent: "sigmoid" for deepseek_v3/kimi_k2
  std::string topk_method;   // "greedy", "group_limited_greedy" or "noaux_tc"; absent: "noaux_tc"
                             // for deepseek_v3/kimi_k2, else "greedy"
  int num_nextn_predict_layers = 0;  // MTP layers stored after the last layer (V3: 1)

  std::string hidden_act = "silu";
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;  // top level, or inside rope_parameters
  int64_t max_position_embeddings = 0;
  RopeScalingConfig rope_scaling;
  QuantizationConfig quantization;

  int64_t bos_token_id = -1;           // -1: absent or null
  std::vector<int64_t> eos_token_ids;  // eos_token_id: an int or a list of ints
  bool tie_word_embeddings = false;

  // MiniCPM3's muP-style scalings (docs/MODELS.md §MiniCPM3; read for model_type "minicpm3" only):
  // embeddings × scale_emb, each residual branch × scale_depth / sqrt(num_hidden_layers), the
  // final normed hidden state ÷ (hidden_size / dim_model_base) before lm_head. A key absent from
  // config.json takes transformers' default (12, 1.4, 256); JSON null, or 0 here, is a no-op.
  double scale_emb = 1.0;
  double scale_depth = 0.0;
  int dim_model_base = 0;

  int d_qk() const { return qk_nope_head_dim + qk_rope_head_dim; }
  bool has_q_lora() const { return q_lora_rank > 0; }
  bool is_moe() const { return n_routed_experts > 0; }
  // MiniCPM3 rotates pairs (i, i + d_r/2) of the checkpoint layout; DeepSeek's layout is
  // interleaved (docs/kernels/rope.md §The rotation).
  bool neox_rope() const { return model_type == "minicpm3"; }
  double residual_scale() const;  // 1 without scale_depth
  double logits_divisor() const;  // 1 without dim_model_base
  // Layer i has an MoE FFN (docs/MODELS.md §Derived values: DeepSeek's modeling-code rule).
  bool is_moe_layer(int i) const {
    return is_moe() && i >= first_k_dense_replace && i % moe_layer_freq == 0;
  }
};

// Parses config.json text. A top-level "text_config" object (Kimi-K2.5 style) holds the language
// model's fields; keys missing there (torch_dtype, quantization_config) are read from the top.
// Errors name source_name, the field and the value, e.g.
//   config.json: field "kv_lora_rank" must be a positive integer, got -1
// and come back as invalid_argument (bad JSON, bad value) or unimplemented (a valid value this
// engine does not support: another quantization method or RoPE scaling type). The result has
// passed validate_model_config.
Result<ModelConfig> parse_model_config(const std::string& json_text,
                                       const std::string& source_name);

// Reads and parses `path` if it is a file, or `path`/config.json if it is a directory. Missing
// files give not_found; files over 16 MiB are refused (no real config comes near).
Result<ModelConfig> load_model_config(const std::string& path_to_dir_or_config_json);

// The cross-field checks of docs/RELIABILITY.md §Checklist R17 that do not need the weights:
// positive dims, num_experts_per_tok <= n_routed_experts, first_k_dense_replace <=
// num_hidden_layers, a finite positive rope factor, expert groups that divide the experts, and a
// BF16 latent KV cache for max_position_embeddings tokens over all layers that fits in int64 bytes.
Status validate_model_config(const ModelConfig& config, const std::string& source_name);

// Built-in configs of the released models, numbers from docs/MODELS.md §Configs:
// "v2", "v2-lite", "v3" (also R1), "kimi-k2", "moonlight", "minicpm3". Unknown names give
// invalid_argument listing these.
Result<ModelConfig> model_preset(std::string_view name);
std::span<const std::string_view> model_preset_names();

}  // namespace mla
