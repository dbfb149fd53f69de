// Tests of ModelConfig: presets against docs/MODELS.md §Configs, parsing of realistic config.json
// texts (V2-Lite, V3, Kimi-K2, Kimi-K2.5 nesting), and every bad-config case of
// docs/RELIABILITY.md §Checklist R17 (one error naming the file, the field and the value).
#include "model/model_config.h"
#include "model/model_rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

namespace mla {
namespace {

using Json = nlohmann::json;

// As published with DeepSeek-V2-Lite (yarn numbers as JSON ints, q_lora_rank null).
constexpr const char* kV2LiteConfig = R"({
  "architectures": ["DeepseekV2ForCausalLM"],
  "attention_bias": false, "attention_dropout": 0.0,
  "auto_map": {"AutoConfig": "configuration_deepseek.DeepseekV2Config",
               "AutoModelForCausalLM": "modeling_deepseek.DeepseekV2ForCausalLM"},
  "aux_loss_alpha": 0.001, "bos_token_id": 100000, "eos_token_id": 100001,
  "first_k_dense_replace": 1, "hidden_act": "silu", "hidden_size": 2048,
  "initializer_range": 0.02, "intermediate_size": 10944, "kv_lora_rank": 512,
  "max_position_embeddings": 163840, "model_type": "deepseek_v2",
  "moe_intermediate_size": 1408, "moe_layer_freq": 1, "n_group": 1, "n_routed_experts": 64,
  "n_shared_experts": 2, "norm_topk_prob": false, "num_attention_heads": 16,
  "num_experts_per_tok": 6, "num_hidden_layers": 27, "num_key_value_heads": 16,
  "pretraining_tp": 1, "q_lora_rank": null, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
  "rms_norm_eps": 1e-06,
  "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 0.707,
                   "mscale_all_dim": 0.707, "original_max_position_embeddings": 4096,
                   "type": "yarn"},
  "rope_theta": 10000, "routed_scaling_factor": 1.0, "scoring_func": "softmax", "seq_aux": true,
  "tie_word_embeddings": false, "topk_group": 1, "topk_method": "greedy",
  "torch_dtype": "bfloat16", "transformers_version": "4.33.1", "use_cache": true,
  "v_head_dim": 128, "vocab_size": 102400
})";

// DeepSeek-V3 with its FP8 quantization_config (yarn numbers as floats).
constexpr const char* kV3Config = R"({
  "architectures": ["DeepseekV3ForCausalLM"], "attention_bias": false,
  "aux_loss_alpha": 0.001, "bos_token_id": 0, "eos_token_id": 1, "ep_size": 1,
  "first_k_dense_replace": 3, "hidden_act": "silu", "hidden_size": 7168,
  "intermediate_size": 18432, "kv_lora_rank": 512, "max_position_embeddings": 163840,
  "model_type": "deepseek_v3", "moe_intermediate_size": 2048, "moe_layer_freq": 1, "n_group": 8,
  "n_routed_experts": 256, "n_shared_experts": 1, "norm_topk_prob": true,
  "num_attention_heads": 128, "num_experts_per_tok": 8, "num_hidden_layers": 61,
  "num_key_value_heads": 128, "num_nextn_predict_layers": 1, "q_lora_rank": 1536,
  "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
  "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                          "weight_block_size": [128, 128]},
  "rms_norm_eps": 1e-06,
  "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 40.0, "mscale": 1.0,
                   "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096,
                   "type": "yarn"},
  "rope_theta": 10000, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "seq_aux": true,
  "tie_word_embeddings": false, "topk_group": 4, "topk_method": "noaux_tc",
  "torch_dtype": "bfloat16", "transformers_version": "4.46.3", "use_cache": true,
  "v_head_dim": 128, "vocab_size": 129280
})";

// Kimi-K2-Instruct.
constexpr const char* kKimiK2Config = R"({
  "architectures": ["DeepseekV3ForCausalLM"], "attention_bias": false,
  "attention_dropout": 0.0, "aux_loss_alpha": 0.001, "bos_token_id": 163584,
  "eos_token_id": 163585, "first_k_dense_replace": 1, "hidden_act": "silu",
  "hidden_size": 7168, "initializer_range": 0.02, "intermediate_size": 18432,
  "kv_lora_rank": 512, "max_position_embeddings": 131072, "model_type": "kimi_k2",
  "moe_intermediate_size": 2048, "moe_layer_freq": 1, "n_group": 1, "n_routed_experts": 384,
  "n_shared_experts": 1, "norm_topk_prob": true, "num_attention_heads": 64,
  "num_experts_per_tok": 8, "num_hidden_layers": 61, "num_key_value_heads": 64,
  "num_nextn_predict_layers": 0, "pretraining_tp": 1, "q_lora_rank": 1536,
  "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
  "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                          "weight_block_size": [128, 128]},
  "rms_norm_eps": 1e-06,
  "rope_scaling": {"beta_fast": 1.0, "beta_slow": 1.0, "factor": 32.0, "mscale": 1.0,
                   "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096,
                   "type": "yarn"},
  "rope_theta": 50000.0, "routed_scaling_factor": 2.827, "scoring_func": "sigmoid",
  "seq_aux": true, "tie_word_embeddings": false, "topk_group": 1, "topk_method": "noaux_tc",
  "torch_dtype": "bfloat16", "transformers_version": "4.48.3", "use_cache": true,
  "v_head_dim": 128, "vocab_size": 163840
})";

ModelConfig preset(std::string_view name) {
  Result<ModelConfig> c = model_preset(name);
  EXPECT_TRUE(c.ok()) << name << ": " << c.status().to_string();
  return c.ok() ? *c : ModelConfig{};
}

ModelConfig parse_ok(const std::string& text) {
  Result<ModelConfig> c = parse_model_config(text, "config.json");
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return c.ok() ? *c : ModelConfig{};
}

void expect_same(const ModelConfig& a, const ModelConfig& b) {
  EXPECT_EQ(a.model_type, b.model_type);
  EXPECT_EQ(a.torch_dtype, b.torch_dtype);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.hidden_size, b.hidden_size);
  EXPECT_EQ(a.num_hidden_layers, b.num_hidden_layers);
  EXPECT_EQ(a.num_attention_heads, b.num_attention_heads);
  EXPECT_EQ(a.q_lora_rank, b.q_lora_rank);
  EXPECT_EQ(a.kv_lora_rank, b.kv_lora_rank);
  EXPECT_EQ(a.qk_nope_head_dim, b.qk_nope_head_dim);
  EXPECT_EQ(a.qk_rope_head_dim, b.qk_rope_head_dim);
  EXPECT_EQ(a.v_head_dim, b.v_head_dim);
  EXPECT_EQ(a.intermediate_size, b.intermediate_size);
  EXPECT_EQ(a.moe_intermediate_size, b.moe_intermediate_size);
  EXPECT_EQ(a.n_routed_experts, b.n_routed_experts);
  EXPECT_EQ(a.n_shared_experts, b.n_shared_experts);
  EXPECT_EQ(a.num_experts_per_tok, b.num_experts_per_tok);
  EXPECT_EQ(a.n_group, b.n_group);
  EXPECT_EQ(a.topk_group, b.topk_group);
  EXPECT_EQ(a.first_k_dense_replace, b.first_k_dense_replace);
  EXPECT_EQ(a.moe_layer_freq, b.moe_layer_freq);
  EXPECT_EQ(a.routed_scaling_factor, b.routed_scaling_factor);
  EXPECT_EQ(a.norm_topk_prob, b.norm_topk_prob);
  EXPECT_EQ(a.scoring_func, b.scoring_func);
  EXPECT_EQ(a.topk_method, b.topk_method);
  EXPECT_EQ(a.num_nextn_predict_layers, b.num_nextn_predict_layers);
  EXPECT_EQ(a.hidden_act, b.hidden_act);
  EXPECT_EQ(a.rms_norm_eps, b.rms_norm_eps);
  EXPECT_EQ(a.rope_theta, b.rope_theta);
  EXPECT_EQ(a.max_position_embeddings, b.max_position_embeddings);
  EXPECT_EQ(a.rope_scaling.type, b.rope_scaling.type);
  if (a.rope_scaling.type == RopeScalingType::kYarn) {
    EXPECT_EQ(a.rope_scaling.factor, b.rope_scaling.factor);
    EXPECT_EQ(a.rope_scaling.original_max_position_embeddings,
              b.rope_scaling.original_max_position_embeddings);
    EXPECT_EQ(a.rope_scaling.beta_fast, b.rope_scaling.beta_fast);
    EXPECT_EQ(a.rope_scaling.beta_slow, b.rope_scaling.beta_slow);
    EXPECT_EQ(a.rope_scaling.mscale, b.rope_scaling.mscale);
    EXPECT_EQ(a.rope_scaling.mscale_all_dim, b.rope_scaling.mscale_all_dim);
  }
  EXPECT_EQ(a.quantization.quant_method, b.quantization.quant_method);
  EXPECT_EQ(a.quantization.weight_block_size[0], b.quantization.weight_block_size[0]);
  EXPECT_EQ(a.quantization.weight_block_size[1], b.quantization.weight_block_size[1]);
  EXPECT_EQ(a.bos_token_id, b.bos_token_id);
  EXPECT_EQ(a.eos_token_ids, b.eos_token_ids);
  EXPECT_EQ(a.tie_word_embeddings, b.tie_word_embeddings);
}

TEST(ModelPreset, V2MatchesSpec) {
  const ModelConfig c = preset("v2");
  EXPECT_EQ(c.model_type, "deepseek_v2");
  EXPECT_EQ(c.vocab_size, 102400);
  EXPECT_EQ(c.hidden_size, 5120);
  EXPECT_EQ(c.num_hidden_layers, 60);
  EXPECT_EQ(c.num_attention_heads, 128);
  EXPECT_EQ(c.q_lora_rank, 1536);
  EXPECT_EQ(c.kv_lora_rank, 512);
  EXPECT_EQ(c.d_qk(), 192);
  EXPECT_EQ(c.v_head_dim, 128);
  EXPECT_EQ(c.intermediate_size, 12288);
  EXPECT_EQ(c.moe_intermediate_size, 1536);
  EXPECT_EQ(c.n_routed_experts, 160);
  EXPECT_EQ(c.n_shared_experts, 2);
  EXPECT_EQ(c.num_experts_per_tok, 6);
  EXPECT_EQ(c.n_group, 8);
  EXPECT_EQ(c.topk_group, 3);
  EXPECT_EQ(c.topk_method, "group_limited_greedy");
  EXPECT_EQ(c.scoring_func, "softmax");
  EXPECT_FALSE(c.norm_topk_prob);
  EXPECT_EQ(c.routed_scaling_factor, 16.0);
  EXPECT_EQ(c.first_k_dense_replace, 1);
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::kYarn);
  EXPECT_EQ(c.rope_scaling.factor, 40.0);
  EXPECT_EQ(c.rope_scaling.mscale, 0.707);
  EXPECT_EQ(c.rope_scaling.mscale_all_dim, 0.707);
  EXPECT_EQ(c.max_position_embeddings, 163840);
  EXPECT_EQ(c.bos_token_id, 100000);
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{100001});
  EXPECT_EQ(c.quantization.quant_method, QuantMethod::kNone);
}

TEST(ModelPreset, V2LiteEqualsItsPublishedConfig) {
  const ModelConfig c = preset("v2-lite");
  EXPECT_FALSE(c.has_q_lora());
  EXPECT_EQ(c.num_hidden_layers, 27);
  EXPECT_EQ(c.num_attention_heads, 16);
  EXPECT_EQ(c.n_routed_experts, 64);
  EXPECT_EQ(c.topk_method, "greedy");
  expect_same(c, parse_ok(kV2LiteConfig));
}

TEST(ModelPreset, V3EqualsItsPublishedConfig) {
  const ModelConfig c = preset("v3");
  EXPECT_EQ(c.vocab_size, 129280);
  EXPECT_EQ(c.hidden_size, 7168);
  EXPECT_EQ(c.num_hidden_layers, 61);
  EXPECT_EQ(c.n_routed_experts, 256);
  EXPECT_EQ(c.n_group, 8);
  EXPECT_EQ(c.topk_group, 4);
  EXPECT_EQ(c.first_k_dense_replace, 3);
  EXPECT_EQ(c.routed_scaling_factor, 2.5);
  EXPECT_EQ(c.num_nextn_predict_layers, 1);
  EXPECT_EQ(c.rope_scaling.mscale_all_dim, 1.0);
  EXPECT_EQ(c.quantization.quant_method, QuantMethod::kFp8);
  EXPECT_EQ(c.quantization.weight_block_size[0], 128);
  EXPECT_EQ(c.quantization.weight_block_size[1], 128);
  EXPECT_EQ(c.bos_token_id, 0);
  expect_same(c, parse_ok(kV3Config));
}

TEST(ModelPreset, KimiK2EqualsItsPublishedConfig) {
  const ModelConfig c = preset("kimi-k2");
  EXPECT_EQ(c.model_type, "kimi_k2");
  EXPECT_EQ(c.num_attention_heads, 64);
  EXPECT_EQ(c.n_routed_experts, 384);
  EXPECT_EQ(c.routed_scaling_factor, 2.827);
  EXPECT_EQ(c.rope_theta, 50000);
  EXPECT_EQ(c.rope_scaling.factor, 32.0);
  EXPECT_EQ(c.rope_scaling.beta_fast, 1.0);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  expect_same(c, parse_ok(kKimiK2Config));
}

TEST(ModelPreset, Moonlight) {
  const ModelConfig c = preset("moonlight");
  EXPECT_EQ(c.model_type, "deepseek_v3");
  EXPECT_EQ(c.vocab_size, 163840);
  EXPECT_EQ(c.hidden_size, 2048);
  EXPECT_EQ(c.num_hidden_layers, 27);
  EXPECT_EQ(c.num_attention_heads, 16);
  EXPECT_FALSE(c.has_q_lora());
  EXPECT_EQ(c.intermediate_size, 11264);
  EXPECT_EQ(c.moe_intermediate_size, 1408);
  EXPECT_EQ(c.n_routed_experts, 64);
  EXPECT_EQ(c.n_shared_experts, 2);
  EXPECT_EQ(c.num_experts_per_tok, 6);
  EXPECT_EQ(c.topk_method, "noaux_tc");
  EXPECT_EQ(c.scoring_func, "sigmoid");
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_EQ(c.routed_scaling_factor, 2.446);
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.rope_theta, 50000);
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::kNone);
  EXPECT_EQ(c.max_position_embeddings, 8192);
  EXPECT_EQ(c.bos_token_id, 163584);
}

TEST(ModelPreset, NamesAndUnknown) {
  ASSERT_EQ(model_preset_names().size(), 6u);
  for (std::string_view n : model_preset_names()) EXPECT_TRUE(model_preset(n).ok()) << n;
  Result<ModelConfig> bad = model_preset("v4");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("\"v4\""), std::string::npos);
  EXPECT_NE(bad.status().message().find("moonlight"), std::string::npos);
}

TEST(ModelConfig, MoeLayers) {
  const ModelConfig v3 = preset("v3");
  EXPECT_FALSE(v3.is_moe_layer(0));
  EXPECT_FALSE(v3.is_moe_layer(2));
  EXPECT_TRUE(v3.is_moe_layer(3));
  EXPECT_TRUE(v3.is_moe_layer(60));
  ModelConfig dense = v3;
  dense.n_routed_experts = 0;
  EXPECT_FALSE(dense.is_moe_layer(10));
}

// ---- parsing variants ----

Json v2_lite_json() {
  return Json::parse(kV2LiteConfig);
}

Result<ModelConfig> parse_json(const Json& j) {
  return parse_model_config(j.dump(), "config.json");
}

TEST(ParseModelConfig, QLoraRankNullZeroOrAbsentMeanNoCompression) {
  Json j = v2_lite_json();
  EXPECT_EQ(parse_json(j)->q_lora_rank, 0);
  j["q_lora_rank"] = 0;
  EXPECT_EQ(parse_json(j)->q_lora_rank, 0);
  j.erase("q_lora_rank");
  EXPECT_FALSE(parse_json(j)->has_q_lora());
  j["q_lora_rank"] = 1536;
  EXPECT_EQ(parse_json(j)->q_lora_rank, 1536);
}

TEST(ParseModelConfig, RopeParametersAndRopeType) {
  Json j = v2_lite_json();
  Json rope = j["rope_scaling"];
  rope.erase("type");
  rope["rope_type"] = "yarn";
  rope["rope_theta"] = 20000.0;
  j.erase("rope_scaling");
  j.erase("rope_theta");
  j["rope_parameters"] = rope;
  const ModelConfig c = parse_ok(j.dump());
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::kYarn);
  EXPECT_EQ(c.rope_scaling.factor, 40.0);
  EXPECT_EQ(c.rope_theta, 20000.0);

  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 50000}};
  const ModelConfig plain = parse_ok(j.dump());
  EXPECT_EQ(plain.rope_scaling.type, RopeScalingType::kNone);
  EXPECT_EQ(plain.rope_theta, 50000.0);

  j.erase("rope_parameters");
  j["rope_scaling"] = nullptr;
  EXPECT_EQ(parse_ok(j.dump()).rope_scaling.type, RopeScalingType::kNone);
}

TEST(ParseModelConfig, KimiK25NestsUnderTextConfig) {
  Json text = Json::parse(kKimiK2Config);
  const Json quant = text["quantization_config"];
  text.erase("quantization_config");
  text.erase("torch_dtype");
  const Json top = {{"architectures", {"KimiK25ForConditionalGeneration"}},
                    {"model_type", "kimi_k25"},
                    {"torch_dtype", "bfloat16"},
                    {"quantization_config", quant},
                    {"vision_config", {{"hidden_size", 1152}}},
                    {"text_config", text}};
  const ModelConfig c = parse_ok(top.dump());
  expect_same(c, preset("kimi-k2"));

  Json bad = top;
  bad["text_config"]["kv_lora_rank"] = 0;
  Result<ModelConfig> r = parse_json(bad);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("\"text_config.kv_lora_rank\""), std::string::npos)
      << r.status().message();
  bad = top;
  bad["text_config"] = 7;
  EXPECT_FALSE(parse_json(bad).ok());
}

TEST(ParseModelConfig, EosListDtypeAndScaleFmt) {
  Json j = Json::parse(kV3Config);
  j["eos_token_id"] = {2, 73440};
  j.erase("torch_dtype");
  j["dtype"] = "float32";
  j["quantization_config"]["scale_fmt"] = "ue8m0";
  const ModelConfig c = parse_ok(j.dump());
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{2, 73440}));
  EXPECT_EQ(c.torch_dtype, DType::kF32);
  EXPECT_TRUE(c.quantization.scale_fmt_ue8m0);
}

TEST(ParseModelConfig, DenseModelNeedsNoMoeFields) {
  Json j = v2_lite_json();
  for (const char* k : {"n_routed_experts", "moe_intermediate_size", "num_experts_per_tok",
                        "n_shared_experts", "n_group", "topk_group", "first_k_dense_replace"})
    j.erase(k);
  const ModelConfig c = parse_ok(j.dump());
  EXPECT_FALSE(c.is_moe());
  EXPECT_FALSE(c.is_moe_layer(5));
}

// ---- docs/RELIABILITY.md §Checklist R17 ----

// Applies `mutate` to the V2-Lite config and expects an error of `code` whose message names the
// file and contains every string of `needles`.
void expect_bad(const std::function<void(Json&)>& mutate,
                std::initializer_list<std::string> needles,
                StatusCode code = StatusCode::kInvalidArgument) {
  Json j = v2_lite_json();
  mutate(j);
  Result<ModelConfig> r = parse_json(j);
  ASSERT_FALSE(r.ok()) << "accepted: " << j.dump();
  EXPECT_EQ(r.status().code(), code) << r.status().to_string();
  const std::string& m = r.status().message();
  EXPECT_EQ(m.rfind("config.json: ", 0), 0u) << m;
  for (const std::string& n : needles) EXPECT_NE(m.find(n), std::string::npos) << n << " in " << m;
}

TEST(BadModelConfig, MessageFormat) {
  Json j = v2_lite_json();
  j["kv_lora_rank"] = -1;
  EXPECT_EQ(parse_json(j).status().message(),
            "config.json: field \"kv_lora_rank\" must be a positive integer, got -1");
}

TEST(BadModelConfig, MissingRequiredField) {
  for (const char* k : {"hidden_size", "num_hidden_layers", "num_attention_heads", "kv_lora_rank",
                        "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "vocab_size",
                        "intermediate_size", "max_position_embeddings"}) {
    expect_bad([&](Json& j) { j.erase(k); }, {std::string("\"") + k + "\"", "missing"});
    expect_bad([&](Json& j) { j[k] = nullptr; }, {std::string("\"") + k + "\"", "missing"});
  }
  // MoE fields become required once n_routed_experts is set.
  expect_bad([](Json& j) { j.erase("num_experts_per_tok"); }, {"\"num_experts_per_tok\""});
  expect_bad([](Json& j) { j.erase("moe_intermediate_size"); }, {"\"moe_intermediate_size\""});
}

TEST(BadModelConfig, MistypedField) {
  expect_bad([](Json& j) { j["hidden_size"] = "2048"; }, {"\"hidden_size\"", "\"2048\""});
  expect_bad([](Json& j) { j["num_hidden_layers"] = 27.5; }, {"\"num_hidden_layers\"", "27.5"});
  expect_bad([](Json& j) { j["v_head_dim"] = true; }, {"\"v_head_dim\"", "true"});
  expect_bad([](Json& j) { j["norm_topk_prob"] = "no"; }, {"\"norm_topk_prob\"", "\"no\""});
  expect_bad([](Json& j) { j["rms_norm_eps"] = "1e-6"; }, {"\"rms_norm_eps\"", "\"1e-6\""});
  expect_bad([](Json& j) { j["rope_scaling"] = "yarn"; }, {"\"rope_scaling\"", "\"yarn\""});
  expect_bad([](Json& j) { j["eos_token_id"] = {1, "x"}; }, {"\"eos_token_id\""});
  expect_bad([](Json& j) { j["scoring_func"] = "relu"; }, {"\"scoring_func\"", "\"relu\""});
  expect_bad([](Json& j) { j["topk_method"] = "gready"; }, {"\"topk_method\"", "\"gready\""});
  expect_bad([](Json& j) { j["num_attention_heads"] = 1e20; }, {"\"num_attention_heads\""});
  expect_bad([](Json& j) { j["hidden_size"] = uint64_t{1} << 63; },
             {"\"hidden_size\"", "9223372036854775808"});
}

TEST(BadModelConfig, NonPositiveDims) {
  for (const char* k : {"hidden_size", "num_hidden_layers", "num_attention_heads", "kv_lora_rank",
                        "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"}) {
    for (int v : {0, -1}) {
      expect_bad([&](Json& j) { j[k] = v; },
                 {std::string("\"") + k + "\"", "positive", "got " + std::to_string(v)});
    }
  }
  expect_bad([](Json& j) { j["q_lora_rank"] = -1; }, {"\"q_lora_rank\"", "got -1"});
  expect_bad([](Json& j) { j["hidden_size"] = 1 << 30; }, {"\"hidden_size\"", "at most"});
}

TEST(BadModelConfig, ExpertCounts) {
  expect_bad([](Json& j) { j["num_experts_per_tok"] = 65; },
             {"\"num_experts_per_tok\" (65)", "\"n_routed_experts\" (64)"});
  expect_bad([](Json& j) { j["first_k_dense_replace"] = 28; },
             {"\"first_k_dense_replace\" (28)", "\"num_hidden_layers\" (27)"});
  expect_bad([](Json& j) { j["topk_group"] = 2; }, {"\"topk_group\" (2)"});
  expect_bad([](Json& j) { j["n_group"] = 7; }, {"\"n_group\" (7)"});
  expect_bad([](Json& j) { j["moe_layer_freq"] = 0; }, {"\"moe_layer_freq\"", "got 0"});
}

TEST(BadModelConfig, HugeMaxPositionEmbeddingsOverflowsKvBytes) {
  expect_bad([](Json& j) { j["max_position_embeddings"] = int64_t{1} << 60; },
             {"\"max_position_embeddings\"", "1152921504606846976", "overflow"});
  expect_bad([](Json& j) { j["max_position_embeddings"] = uint64_t{1} << 63; },
             {"\"max_position_embeddings\""});
}

TEST(BadModelConfig, RopeFactor) {
  expect_bad([](Json& j) { j["rope_scaling"]["factor"] = 0; }, {"\"rope_scaling.factor\"", "0"});
  expect_bad([](Json& j) { j["rope_scaling"]["factor"] = -40; },
             {"\"rope_scaling.factor\"", "-40"});
  expect_bad([](Json& j) { j["rope_scaling"]["factor"] = "40"; },
             {"\"rope_scaling.factor\"", "\"40\""});
  expect_bad([](Json& j) { j["rope_scaling"].erase("factor"); }, {"\"rope_scaling.factor\""});
  expect_bad([](Json& j) { j["rope_scaling"]["type"] = "dynamic"; },
             {"\"rope_scaling.type\"", "dynamic", "longrope"}, StatusCode::kUnimplemented);
  // LongRoPE needs both factor lists, of qk_rope_head_dim / 2 = 32 positive numbers each.
  const auto longrope = [](Json& j) {
    j["rope_scaling"] = {{"type", "longrope"},
                         {"short_factor", std::vector<double>(32, 1.0)},
                         {"long_factor", std::vector<double>(32, 2.0)}};
  };
  expect_bad([&](Json& j) { longrope(j), j["rope_scaling"].erase("long_factor"); },
             {"\"rope_scaling.long_factor\"", "missing"});
  expect_bad(
      [&](Json& j) {
        longrope(j), j["rope_scaling"]["short_factor"] = {1.0, 2.0};
      },
      {"\"rope_scaling.short_factor\"", "32 positive numbers", "2 values"});
  expect_bad([&](Json& j) { longrope(j), j["rope_scaling"]["long_factor"][3] = 0; },
             {"\"rope_scaling.long_factor\"", "positive"});
  expect_bad([&](Json& j) { longrope(j), j["rope_scaling"]["short_factor"] = "1"; },
             {"\"rope_scaling.short_factor\"", "list"});
  expect_bad([](Json& j) { j["rope_scaling"].erase("type"); }, {"\"rope_scaling.type\""});

  // JSON text cannot carry NaN or Inf: Python's json writes NaN / Infinity, which is not JSON,
  // and 1e999 overflows. Both are rejected naming the file.
  for (const char* lit : {"NaN", "Infinity", "1e999"}) {
    std::string text = kV2LiteConfig;
    const size_t at = text.find("\"factor\": 40");
    ASSERT_NE(at, std::string::npos);
    text.replace(at, 12, std::string("\"factor\": ") + lit);
    Result<ModelConfig> r = parse_model_config(text, "config.json");
    ASSERT_FALSE(r.ok()) << lit;
    EXPECT_EQ(r.status().message().rfind("config.json: ", 0), 0u) << r.status().message();
  }
  // A config built in memory can: validation names the field.
  for (double f : {std::nan(""), std::numeric_limits<double>::infinity(), 0.0, -1.0}) {
    ModelConfig c = preset("v2");
    c.rope_scaling.factor = f;
    Status s = validate_model_config(c, "config.json");
    ASSERT_FALSE(s.ok()) << f;
    EXPECT_NE(s.message().find("\"rope_scaling.factor\""), std::string::npos) << s.message();
  }
}

TEST(BadModelConfig, UnknownDtypeOrQuantization) {
  expect_bad([](Json& j) { j["torch_dtype"] = "int4"; }, {"\"torch_dtype\"", "\"int4\""});
  expect_bad(
      [](Json& j) {
        j["quantization_config"] = {{"quant_method", "awq"}, {"bits", 4}};
      },
      {"\"quantization_config.quant_method\"", "awq"}, StatusCode::kUnimplemented);
  expect_bad(
      [](Json& j) {
        j["quantization_config"] = {{"fmt", "e4m3"}};
      },
      {"\"quantization_config.quant_method\"", "missing"});
  expect_bad(
      [](Json& j) {
        j["quantization_config"] = {{"quant_method", "fp8"}, {"weight_block_size", {128}}};
      },
      {"\"quantization_config.weight_block_size\"", "[128]"});
  expect_bad(
      [](Json& j) {
        j["quantization_config"] = {{"quant_method", "fp8"}, {"fmt", "e5m2"}};
      },
      {"\"quantization_config.fmt\"", "e5m2"});
}

TEST(BadModelConfig, NotAJsonObject) {
  for (const char* text : {"", "{", "[1, 2]", "42", "{\"hidden_size\": 1,}"}) {
    Result<ModelConfig> r = parse_model_config(text, "m/config.json");
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().message().rfind("m/config.json: ", 0), 0u) << r.status().message();
  }
}

// ---- files ----

class LoadModelConfig : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("mla_model_config_test_" +
            std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
            std::to_string(reinterpret_cast<uintptr_t>(this)));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_F(LoadModelConfig, DirectoryOrFile) {
  std::ofstream(dir_ / "config.json") << kV3Config;
  Result<ModelConfig> from_dir = load_model_config(dir_.string());
  ASSERT_TRUE(from_dir.ok()) << from_dir.status().to_string();
  expect_same(*from_dir, preset("v3"));
  Result<ModelConfig> from_file = load_model_config((dir_ / "config.json").string());
  ASSERT_TRUE(from_file.ok());
  expect_same(*from_file, preset("v3"));
}

TEST_F(LoadModelConfig, ErrorsNameThePath) {
  Result<ModelConfig> missing = load_model_config((dir_ / "nope").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("nope"), std::string::npos);

  std::filesystem::create_directories(dir_ / "empty_model");
  Result<ModelConfig> no_config = load_model_config((dir_ / "empty_model").string());
  ASSERT_FALSE(no_config.ok());
  EXPECT_NE(no_config.status().message().find("empty_model/config.json"), std::string::npos);

  std::ofstream(dir_ / "bad.json") << R"({"hidden_size": -3})";
  Result<ModelConfig> bad = load_model_config((dir_ / "bad.json").string());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("bad.json: "), std::string::npos);

  std::ofstream(dir_ / "empty.json");
  EXPECT_FALSE(load_model_config((dir_ / "empty.json").string()).ok());
}

// MiniCPM3-4B's config.json as docs/MODELS.md §Configs / §MiniCPM3 describe it: no v_head_dim, no
// MoE keys, LongRoPE, and its three scalings.
TEST(ModelConfig, MiniCpm3) {
  Json j = {{"architectures", {"MiniCPM3ForCausalLM"}},
            {"model_type", "minicpm3"},
            {"vocab_size", 73448},
            {"hidden_size", 2560},
            {"num_hidden_layers", 62},
            {"num_attention_heads", 40},
            {"num_key_value_heads", 40},
            {"q_lora_rank", 768},
            {"kv_lora_rank", 256},
            {"qk_nope_head_dim", 64},
            {"qk_rope_head_dim", 32},
            {"intermediate_size", 6400},
            {"max_position_embeddings", 32768},
            {"rms_norm_eps", 1e-5},
            {"rope_scaling",
             {{"type", "longrope"},
              {"short_factor", std::vector<double>(16, 1.05)},
              {"long_factor", std::vector<double>(16, 1.5)},
              {"original_max_position_embeddings", 32768}}},
            {"scale_emb", 12},
            {"scale_depth", 1.4},
            {"dim_model_base", 256},
            {"bos_token_id", 1},
            {"eos_token_id", {2, 73440}},
            {"torch_dtype", "bfloat16"}};
  const ModelConfig c = parse_ok(j.dump());
  EXPECT_EQ(c.v_head_dim, 64);  // hidden_size / num_attention_heads
  EXPECT_FALSE(c.is_moe());
  EXPECT_TRUE(c.neox_rope());
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::kLongrope);
  EXPECT_EQ(c.rope_scaling.short_factor, std::vector<double>(16, 1.05));
  EXPECT_EQ(c.rope_scaling.long_factor, std::vector<double>(16, 1.5));
  EXPECT_EQ(c.rope_scaling.factor, 1.0);  // max_position_embeddings / original
  EXPECT_EQ(c.scale_emb, 12.0);
  EXPECT_DOUBLE_EQ(c.residual_scale(), 1.4 / std::sqrt(62.0));
  EXPECT_DOUBLE_EQ(c.logits_divisor(), 10.0);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{2, 73440}));

  // The same dims as the built-in preset; without the scalings they are no-ops.
  const ModelConfig p = preset("minicpm3");
  EXPECT_EQ(p.v_head_dim, c.v_head_dim);
  EXPECT_EQ(p.kv_lora_rank, c.kv_lora_rank);
  // Absent scalings take transformers' MiniCPM3Config defaults; null ones are no-ops.
  Json absent = j, null = j;
  for (const char* k : {"scale_emb", "scale_depth", "dim_model_base"}) {
    absent.erase(k);
    null[k] = nullptr;
  }
  const ModelConfig d = parse_ok(absent.dump());
  EXPECT_EQ(d.scale_emb, 12.0);
  EXPECT_DOUBLE_EQ(d.residual_scale(), 1.4 / std::sqrt(62.0));
  EXPECT_DOUBLE_EQ(d.logits_divisor(), 10.0);
  const ModelConfig plain = parse_ok(null.dump());
  EXPECT_EQ(plain.scale_emb, 1.0);
  EXPECT_EQ(plain.residual_scale(), 1.0);
  EXPECT_EQ(plain.logits_divisor(), 1.0);

  // RoPE as the kernels get it: NeoX pairs, short factors up to original_max_position_embeddings,
  // long ones past it; the cos / sin factor is 1 at factor 1, else sqrt(1 + ln f / ln original).
  RopeConfig rope = rope_config_of(c, 32768);
  EXPECT_EQ(rope.layout, RopeLayout::kNeox);
  EXPECT_EQ(rope.scaling.longrope_ext, c.rope_scaling.short_factor);
  EXPECT_EQ(rope.scaling.longrope_attention, 1.0);
  EXPECT_FALSE(rope.scaling.yarn);
  Json longer = j;
  longer["max_position_embeddings"] = 131072;  // factor 4
  const ModelConfig l = parse_ok(longer.dump());
  EXPECT_EQ(l.rope_scaling.factor, 4.0);
  EXPECT_EQ(rope_config_of(l, 32768).scaling.longrope_ext, c.rope_scaling.short_factor);
  rope = rope_config_of(l, 32769);
  EXPECT_EQ(rope.scaling.longrope_ext, c.rope_scaling.long_factor);
  EXPECT_DOUBLE_EQ(rope.scaling.longrope_attention,
                   std::sqrt(1 + std::log(4.0) / std::log(32768.0)));
  longer["rope_scaling"]["attention_factor"] = 1.5;
  EXPECT_EQ(rope_config_of(parse_ok(longer.dump()), 32768).scaling.longrope_attention, 1.5);
  EXPECT_EQ(rope_config_of(preset("v3"), 4096).layout, RopeLayout::kInterleaved);
  EXPECT_TRUE(rope_config_of(preset("v3"), 4096).scaling.yarn);

  // Bad values name the field and the value.
  const auto bad = [&](const std::function<void(Json&)>& mutate, const std::string& needle) {
    Json m = j;
    mutate(m);
    Result<ModelConfig> r = parse_json(m);
    ASSERT_FALSE(r.ok()) << m.dump();
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  };
  bad([](Json& m) { m["scale_emb"] = 0; }, "\"scale_emb\" must be a positive number, got 0");
  bad([](Json& m) { m["scale_depth"] = -1.4; }, "\"scale_depth\"");
  bad([](Json& m) { m["dim_model_base"] = 0; }, "\"dim_model_base\"");
  bad([](Json& m) { m["rope_scaling"]["attention_factor"] = -1; }, "attention_factor");
  bad([](Json& m) { m["hidden_size"] = 2561; },
      "without \"v_head_dim\", \"hidden_size\" (2561) must be a multiple of "
      "\"num_attention_heads\" (40)");
  bad(
      [](Json& m) {
        m["rope_scaling"]["original_max_position_embeddings"] = 1;  // ln 1 = 0 at factor 32768
      },
      "\"rope_scaling.original_max_position_embeddings\" must be at least 2");
  // transformers' precedence: a top-level original_max_position_embeddings over the block's.
  Json both = j;
  both["original_max_position_embeddings"] = 4096;
  EXPECT_EQ(parse_ok(both.dump()).rope_scaling.original_max_position_embeddings, 4096);

  // Only MiniCPM3 may leave v_head_dim out; DeepSeek's keys stay interleaved and unscaled.
  Json v2 = v2_lite_json();
  v2.erase("v_head_dim");
  Result<ModelConfig> r = parse_json(v2);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("\"v_head_dim\" is missing"), std::string::npos)
      << r.status().message();
  EXPECT_FALSE(preset("v2-lite").neox_rope());
}
}  // namespace
}  // namespace mla
