// make-tiny's config.json: one row per family after its real config (docs/MODELS.md §Configs),
// shrunk to tiny dims, written with the family's Hugging Face keys.
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <vector>

#include "model/weight_layout.h"
#include "tiny/tiny_checkpoint.h"

namespace mla {
namespace {

using Json = nlohmann::json;

enum class Yarn { kNone, kV2, kV3, kKimi };  // the rope_scaling block of the real config

// Routing and layout of one family, after its real config (docs/MODELS.md §Configs), shrunk.
struct Family {
  std::string_view name;
  const char* model_type;
  const char* architecture;
  int q_lora_rank;  // 0: JSON null (plain q_proj)
  int experts, shared, topk, groups, topk_groups;
  const char* topk_method;
  const char* scoring;
  bool norm_topk;
  double scaling;
  int dense_layers, layers;
  double eps, theta;
  Yarn yarn;
  int64_t max_pos;
  int nextn;  // MTP layers
  bool fp8;
};

// clang-format off
constexpr Family kFamilies[] = {
  // name  model_type  architecture  r_q  E  S  K  G  G_k  topk_method  scoring  norm_topk
  // scaling  dense  layers  eps  theta  yarn  max_pos  MTP  fp8
  {"v2-lite", "deepseek_v2", "DeepseekV2ForCausalLM", 0, 8, 2, 2, 1, 1, "greedy", "softmax", false,
   1.0, 1, 3, 1e-6, 10000, Yarn::kV2, 163840, 0, false},
  {"v2", "deepseek_v2", "DeepseekV2ForCausalLM", 96, 8, 2, 3, 4, 2, "group_limited_greedy",
   "softmax", false, 16.0, 1, 3, 1e-6, 10000, Yarn::kV2, 163840, 0, false},
  {"v3", "deepseek_v3", "DeepseekV3ForCausalLM", 160, 8, 1, 2, 4, 2, "noaux_tc", "sigmoid", true,
   2.5, 2, 4, 1e-6, 10000, Yarn::kV3, 163840, 1, true},
  {"kimi-k2", "kimi_k2", "DeepseekV3ForCausalLM", 160, 12, 1, 2, 1, 1, "noaux_tc", "sigmoid", true,
   2.827, 1, 3, 1e-6, 50000, Yarn::kKimi, 131072, 0, true},
  {"moonlight", "deepseek_v3", "DeepseekV3ForCausalLM", 0, 8, 2, 2, 1, 1, "noaux_tc", "sigmoid",
   true, 2.446, 1, 3, 1e-5, 50000, Yarn::kNone, 8192, 0, false},
  // Dense (no MoE fields); its config is written by minicpm3_json.
  {"minicpm3", "minicpm3", "MiniCPM3ForCausalLM", 96, 0, 0, 0, 1, 1, "", "", false,
   1.0, 3, 3, 1e-5, 10000, Yarn::kNone, 32768, 0, false},
};
// clang-format on
constexpr std::string_view kFamilyNames[] = {"v2-lite", "v2",        "v3",
                                             "kimi-k2", "moonlight", "minicpm3"};

constexpr int kHidden = 192, kHeads = 4, kKvLoraRank = 48, kNope = 16, kRope = 8, kV = 16;
constexpr int kIntermediate = 320, kExpertWidth = 96;
constexpr int64_t kVocab = 320;

Result<const Family*> find_family(const TinyCheckpointOptions& o) {
  for (const Family& f : kFamilies)
    if (f.name == o.family) {
      if (o.layers < 0 || o.layers > kMaxTinyLayers)
        return invalid_argument(
            fmt::format("make-tiny: --layers must be 1..{}, got {}", kMaxTinyLayers, o.layers));
      if (o.shards < 1 || o.shards > kMaxTinyShards)
        return invalid_argument(
            fmt::format("make-tiny: --shards must be 1..{}, got {}", kMaxTinyShards, o.shards));
      return &f;
    }
  return invalid_argument(fmt::format("make-tiny: unknown family {} (expected one of {})",
                                      quote_name(o.family), fmt::join(kFamilyNames, ", ")));
}

Json rope_scaling(Yarn y) {
  switch (y) {
    case Yarn::kNone:
      return nullptr;
    case Yarn::kV2:  // the V2 hub configs write these as JSON integers
      return {
          {"beta_fast", 32}, {"beta_slow", 1},          {"factor", 40},
          {"mscale", 0.707}, {"mscale_all_dim", 0.707}, {"original_max_position_embeddings", 4096},
          {"type", "yarn"}};
    case Yarn::kV3:
      return {{"beta_fast", 32.0},     {"beta_slow", 1.0},
              {"factor", 40.0},        {"mscale", 1.0},
              {"mscale_all_dim", 1.0}, {"original_max_position_embeddings", 4096},
              {"type", "yarn"}};
    case Yarn::kKimi:
      return {{"beta_fast", 1.0},      {"beta_slow", 1.0},
              {"factor", 32.0},        {"mscale", 1.0},
              {"mscale_all_dim", 1.0}, {"original_max_position_embeddings", 4096},
              {"type", "yarn"}};
  }
  return nullptr;
}

bool wants_fp8(const Family& f, TinyWeights w) {
  return w == TinyWeights::kFP8 || (w == TinyWeights::kDefault && f.fp8);
}

// The keys every family's config.json has, at tiny dims (or the real model's with --real-dims),
// and the FP8 quantization block when the weights are FP8.
Json common_json(const Family& f, const TinyCheckpointOptions& o) {
  Json j = {
      {"architectures", {f.architecture}},
      {"attention_bias", false},
      {"attention_dropout", 0.0},
      {"bos_token_id", 0},
      {"eos_token_id", 1},
      {"hidden_act", "silu"},
      {"hidden_size", kHidden},
      {"intermediate_size", kIntermediate},
      {"kv_lora_rank", kKvLoraRank},
      {"max_position_embeddings", f.max_pos},
      {"model_type", f.model_type},
      {"num_attention_heads", kHeads},
      {"num_hidden_layers", o.layers > 0 ? o.layers : f.layers},
      {"num_key_value_heads", kHeads},
      {"q_lora_rank", f.q_lora_rank > 0 ? Json(f.q_lora_rank) : Json(nullptr)},
      {"qk_nope_head_dim", kNope},
      {"qk_rope_head_dim", kRope},
      {"rms_norm_eps", f.eps},
      {"rope_theta", f.theta},
      {"tie_word_embeddings", false},
      {"torch_dtype", "bfloat16"},
      {"use_cache", true},
      {"vocab_size", kVocab},
  };
  if (o.real_dims) {
    const ModelConfig c = *model_preset(f.name);  // every family is a preset
    j["hidden_size"] = c.hidden_size;
    j["intermediate_size"] = c.intermediate_size;
    j["kv_lora_rank"] = c.kv_lora_rank;
    j["num_attention_heads"] = j["num_key_value_heads"] = c.num_attention_heads;
    j["q_lora_rank"] = c.has_q_lora() ? Json(c.q_lora_rank) : Json(nullptr);
    j["qk_nope_head_dim"] = c.qk_nope_head_dim;
    j["qk_rope_head_dim"] = c.qk_rope_head_dim;
    j["vocab_size"] = c.vocab_size;
  }
  if (wants_fp8(f, o.weights))
    j["quantization_config"] = {{"activation_scheme", "dynamic"},
                                {"fmt", "e4m3"},
                                {"quant_method", "fp8"},
                                {"weight_block_size", {128, 128}}};
  return j;
}

// MiniCPM3-4B's own keys (docs/MODELS.md §Configs, §MiniCPM3): no v_head_dim (its modeling code
// takes hidden_size / num_attention_heads = 48 here, unlike d_n = 16), LongRoPE with short factors
// away from 1 (the ones used below 32k positions), scale_emb / scale_depth as the real model,
// dim_model_base 32 (logits ÷ 6; the real model ÷ 10).
Json minicpm3_json(const Family& f, const TinyCheckpointOptions& o) {
  Json j = common_json(f, o);
  std::vector<double> short_factor = {1.0, 1.25, 2.5, 7.0}, long_factor = {1.1, 2.0, 6.0, 30.0};
  j["dim_model_base"] = 32;
  if (o.real_dims) {
    j["dim_model_base"] = model_preset(f.name)->dim_model_base;
    short_factor = long_factor = std::vector<double>(size_t(j["qk_rope_head_dim"]) / 2, 1.0);
  }
  j["initializer_range"] = 0.1;
  j["rope_scaling"] = {{"long_factor", long_factor},
                       {"original_max_position_embeddings", f.max_pos},
                       {"short_factor", short_factor},
                       {"type", "longrope"}};
  j["scale_depth"] = 1.4;
  j["scale_emb"] = 12;
  return j;
}

// DeepSeek's keys: MoE routing, YaRN, v_head_dim, MTP layers.
Json config_json(const Family& f, const TinyCheckpointOptions& o) {
  if (f.model_type == std::string_view("minicpm3")) return minicpm3_json(f, o);
  Json j = common_json(f, o);
  const int layers = j["num_hidden_layers"];
  // A lone layer is MoE, so MoE is exercised at any depth.
  const int dense = std::min(f.dense_layers, layers - 1);
  const Json more = {
      {"aux_loss_alpha", 0.001},
      {"ep_size", 1},
      {"first_k_dense_replace", dense},
      {"initializer_range", 0.02},
      {"moe_intermediate_size", kExpertWidth},
      {"moe_layer_freq", 1},
      {"n_group", f.groups},
      {"n_routed_experts", f.experts},
      {"n_shared_experts", f.shared},
      {"norm_topk_prob", f.norm_topk},
      {"num_experts_per_tok", f.topk},
      {"pretraining_tp", 1},
      {"rope_scaling", rope_scaling(f.yarn)},
      {"routed_scaling_factor", f.scaling},
      {"scoring_func", f.scoring},
      {"seq_aux", true},
      {"topk_group", f.topk_groups},
      {"topk_method", f.topk_method},
      {"transformers_version", "4.46.3"},
      {"v_head_dim", kV},
  };
  j.update(more);
  if (o.real_dims) {
    const ModelConfig c = *model_preset(f.name);
    j["moe_intermediate_size"] = c.moe_intermediate_size;
    j["n_routed_experts"] = c.n_routed_experts;
    j["n_shared_experts"] = c.n_shared_experts;
    j["num_experts_per_tok"] = c.num_experts_per_tok;
    j["n_group"] = c.n_group;
    j["topk_group"] = c.topk_group;
    j["v_head_dim"] = c.v_head_dim;
  }
  if (f.model_type != std::string_view("deepseek_v2"))
    j["num_nextn_predict_layers"] = o.mtp ? f.nextn : 0;
  return j;
}
}  // namespace

std::span<const std::string_view> tiny_family_names() {
  return kFamilyNames;
}

Result<std::string> tiny_config_json(const TinyCheckpointOptions& o) {
  MLA_ASSIGN_OR_RETURN(const Family* f, find_family(o));
  return config_json(*f, o).dump(2) + "\n";
}

}  // namespace mla
