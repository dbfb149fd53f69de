// Tests of make-tiny (write_tiny_checkpoint): every family, BF16 and FP8, one and two files, loads
// with load_model_weights; configs carry the family's keys; FP8 scales dequantise correctly.
#include "tiny/tiny_checkpoint.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "checkpoint_test_util.h"
#include "core/dtype.h"
#include "io/safetensors.h"
#include "model/model_weights.h"
#include "model/weight_layout.h"

namespace mla {
namespace {

using testing_model::make_tiny;
using testing_model::read_text;
using testing_model::TempDir;

struct Case {
  std::string family;
  TinyWeights weights;
  int shards;
};

class TinyLoads : public ::testing::TestWithParam<Case> {};

TEST_P(TinyLoads, LoadsCleanly) {
  const Case& p = GetParam();
  TempDir dir;
  make_tiny(dir.path(), p.family, p.shards, p.weights);
  Result<ModelWeights> w = load_model_weights(dir.path());
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  const ModelConfig& c = w->config;
  EXPECT_EQ(w->checkpoint.indexed(), p.shards > 1);
  EXPECT_EQ(int(w->checkpoint.shards().size()), p.shards);
  EXPECT_GT(w->checkpoint.bytes_mapped(), 0u);
  ASSERT_EQ(int(w->layers.size()), c.num_hidden_layers);
  const bool fp8 = p.weights == TinyWeights::kFP8 || (p.weights == TinyWeights::kDefault &&
                                                      (p.family == "v3" || p.family == "kimi-k2"));
  EXPECT_EQ(c.quantization.quant_method == QuantMethod::kFp8, fp8);
  EXPECT_EQ(w->embed_tokens.weight->dtype, DType::kBF16);  // never FP8 (docs/MODELS.md)
  EXPECT_EQ(w->lm_head.weight->name, "lm_head.weight");
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    const LayerWeights& l = w->layers[size_t(i)];
    EXPECT_EQ(l.q_proj.present(), !c.has_q_lora());
    EXPECT_EQ(l.q_b_proj.present(), c.has_q_lora());
    EXPECT_EQ(l.kv_b_proj.fp8(), fp8);
    EXPECT_EQ(l.kv_a_layernorm.weight->dtype, DType::kBF16);
    EXPECT_EQ(l.moe, c.is_moe_layer(i));
    if (!l.moe) {
      EXPECT_TRUE(l.mlp.down_proj.present());
      continue;
    }
    EXPECT_EQ(int(l.experts.size()), c.n_routed_experts);
    EXPECT_EQ(l.router.weight->dtype, DType::kBF16);  // the router stays BF16
    EXPECT_FALSE(l.router.fp8());
    EXPECT_EQ(l.router_bias.present(), c.topk_method == "noaux_tc");
    if (l.router_bias.present()) {
      EXPECT_EQ(l.router_bias.weight->dtype, DType::kF32);
    }
    EXPECT_TRUE(l.shared_experts.up_proj.present());
    EXPECT_EQ(l.experts.back().down_proj.fp8(), fp8);
  }
  // V3: the MTP layer is in the files and skipped; K2: the inv_freq buffers are.
  int64_t skipped = 0;
  if (p.family == "v3") {
    const std::vector<ExpectedTensor> mtp = mtp_tensors(c);
    skipped = int64_t(mtp.size());
    if (fp8)
      for (const ExpectedTensor& e : mtp) skipped += e.fp8_in_release;
    EXPECT_NE(w->checkpoint.find("model.layers.4.eh_proj.weight"), nullptr);
  }
  if (p.family == "kimi-k2") skipped = c.num_hidden_layers;
  EXPECT_EQ(w->skipped_tensors, skipped);
}

std::vector<Case> all_cases() {
  std::vector<Case> v;
  for (std::string_view f : tiny_family_names())
    for (TinyWeights wt : {TinyWeights::kDefault, TinyWeights::kBF16, TinyWeights::kFP8})
      for (int shards : {1, 2}) v.push_back({std::string(f), wt, shards});
  return v;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  std::string n = info.param.family;
  for (char& ch : n)
    if (ch == '-') ch = '_';
  const char* w[] = {"default", "bf16", "fp8"};
  return n + "_" + w[int(info.param.weights)] + "_" + std::to_string(info.param.shards) + "shards";
}

INSTANTIATE_TEST_SUITE_P(AllFamilies, TinyLoads, ::testing::ValuesIn(all_cases()), case_name);

TEST(TinyCheckpoint, ConfigHasTheFamilyKeys) {
  TinyCheckpointOptions o;
  o.family = "v3";
  const nlohmann::json v3 = nlohmann::json::parse(tiny_config_json(o).value());
  EXPECT_EQ(v3["model_type"], "deepseek_v3");
  EXPECT_EQ(v3["architectures"][0], "DeepseekV3ForCausalLM");
  EXPECT_EQ(v3["num_nextn_predict_layers"], 1);
  EXPECT_EQ(v3["quantization_config"]["weight_block_size"], nlohmann::json({128, 128}));
  EXPECT_EQ(v3["rope_scaling"]["type"], "yarn");
  EXPECT_EQ(v3["topk_method"], "noaux_tc");
  o.family = "v2-lite";
  const nlohmann::json lite = nlohmann::json::parse(tiny_config_json(o).value());
  EXPECT_TRUE(lite["q_lora_rank"].is_null());
  EXPECT_TRUE(lite["rope_scaling"]["factor"].is_number_integer());  // as the V2 hub configs
  EXPECT_FALSE(lite.contains("quantization_config"));
  EXPECT_FALSE(lite.contains("num_nextn_predict_layers"));
  o.family = "moonlight";
  const nlohmann::json moon = nlohmann::json::parse(tiny_config_json(o).value());
  EXPECT_TRUE(moon["rope_scaling"].is_null());
  EXPECT_EQ(moon["rms_norm_eps"], 1e-5);
  o.family = "kimi-k2";
  EXPECT_EQ(nlohmann::json::parse(tiny_config_json(o).value())["model_type"], "kimi_k2");
}

TEST(TinyCheckpoint, BadOptions) {
  TinyCheckpointOptions o;
  o.family = "v4";
  TempDir dir;
  Result<TinyCheckpointInfo> r = write_tiny_checkpoint(o, dir.path());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("unknown family \"v4\""), std::string::npos);
  o.family = "v3";
  o.layers = kMaxTinyLayers + 1;
  EXPECT_EQ(write_tiny_checkpoint(o, dir.path()).status().code(), StatusCode::kInvalidArgument);
  o.layers = 0;
  o.shards = 0;
  EXPECT_EQ(write_tiny_checkpoint(o, dir.path()).status().code(), StatusCode::kInvalidArgument);
}

TEST(TinyCheckpoint, SameSeedSameBytesOtherSeedOtherBytes) {
  TempDir a, b, c;
  TinyCheckpointOptions o;
  o.family = "v3";
  o.seed = 11;
  ASSERT_TRUE(write_tiny_checkpoint(o, a.path()).ok());
  ASSERT_TRUE(write_tiny_checkpoint(o, b.path()).ok());
  o.seed = 12;
  ASSERT_TRUE(write_tiny_checkpoint(o, c.path()).ok());
  const std::string f = "model-00001-of-00002.safetensors";
  EXPECT_EQ(read_text(a.file(f)), read_text(b.file(f)));
  EXPECT_NE(read_text(a.file(f)), read_text(c.file(f)));
  EXPECT_EQ(read_text(a.file(kCheckpointIndexFile)), read_text(b.file(kCheckpointIndexFile)));
}

// The shards are planned from byte counts and made one at a time: every tensor is written once,
// the index's total_size is the sum of the tensors' bytes in the files, and a block-FP8 weight's
// scale grid sits in its weight's shard (the two are made together).
TEST(TinyCheckpoint, ShardsHoldEachFp8WeightWithItsScales) {
  TempDir dir;
  TinyCheckpointOptions o;
  o.family = "v3";
  o.shards = 7;
  Result<TinyCheckpointInfo> info = write_tiny_checkpoint(o, dir.path());
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  const nlohmann::json index = nlohmann::json::parse(read_text(dir.file(kCheckpointIndexFile)));
  const nlohmann::json& map = index["weight_map"];
  EXPECT_EQ(int64_t(map.size()), info->tensors);
  int scales = 0;
  std::set<std::string> files;
  for (auto it = map.begin(); it != map.end(); ++it) {
    files.insert(it.value().get<std::string>());
    const std::string& name = it.key();
    const std::string suffix = "_scale_inv";
    if (name.size() < suffix.size() ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    ++scales;
    const std::string weight = name.substr(0, name.size() - suffix.size());
    ASSERT_TRUE(map.contains(weight)) << name;
    EXPECT_EQ(map[weight], it.value()) << name;
  }
  EXPECT_GT(scales, 10);
  EXPECT_EQ(files.size(), 7u);
  uint64_t in_files = 0;
  for (const std::string& file : files) {
    Result<SafetensorsFile> f = SafetensorsFile::open(dir.file(file));
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    for (const TensorInfo& t : f->tensors()) in_files += t.byte_size;
  }
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), in_files);
  EXPECT_EQ(info->tensor_bytes, in_files);
  Result<ModelWeights> w = load_model_weights(dir.path());
  ASSERT_TRUE(w.ok()) << w.status().to_string();
}

TEST(TinyCheckpoint, OneLayerIsMoeAndRelayoutRemovesTheOtherForm) {
  TempDir dir;
  TinyCheckpointOptions o;
  o.family = "v2";
  o.layers = 1;
  ASSERT_TRUE(write_tiny_checkpoint(o, dir.path()).ok());
  o.shards = 1;  // rewriting single-file in the same directory must drop the index
  ASSERT_TRUE(write_tiny_checkpoint(o, dir.path()).ok());
  Result<ModelWeights> w = load_model_weights(dir.path());
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  EXPECT_FALSE(w->checkpoint.indexed());
  ASSERT_EQ(w->layers.size(), 1u);
  EXPECT_TRUE(w->layers[0].moe);
}

// Float value of element k of a weight in its file dtype (BF16 or F8_E4M3).
float element(const TensorInfo& t, int64_t k) {
  if (t.dtype == DType::kF8E4M3) return fp8_e4m3_to_f32(t.data[k]);
  uint16_t h;
  std::memcpy(&h, t.data + 2 * k, 2);
  return bf16_to_f32(h);
}

// FP8 weights with their ragged block scales dequantise to the same N(0, 1/fan_in) weights the
// BF16 variant holds: the same seed draws the same values, so every element agrees within e4m3's
// relative step (2^-3 of the block's amax scale at worst, far less for typical values).
TEST(TinyCheckpoint, Fp8DequantisesToTheBf16Weights) {
  TempDir fp8_dir, bf16_dir;
  make_tiny(fp8_dir.path(), "v3", 2, TinyWeights::kFP8);
  make_tiny(bf16_dir.path(), "v3", 2, TinyWeights::kBF16);
  Result<ModelWeights> q = load_model_weights(fp8_dir.path());
  Result<ModelWeights> b = load_model_weights(bf16_dir.path());
  ASSERT_TRUE(q.ok() && b.ok());
  // [320, 192]: a 3×2 grid whose last row and column of blocks are ragged (64 wide).
  const WeightRef& wq = q->layers[0].mlp.gate_proj;
  const TensorInfo& wb = *b->layers[0].mlp.gate_proj.weight;
  ASSERT_TRUE(wq.fp8());
  ASSERT_EQ(wq.scale_inv->shape, (std::vector<int64_t>{3, 2}));
  const int64_t rows = 320, cols = 192;
  double worst = 0;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      float s;
      std::memcpy(&s, wq.scale_inv->data + 4 * ((i / 128) * 2 + j / 128), 4);
      const double real = double(element(*wq.weight, i * cols + j)) * s;  // multiply, not divide
      const double ref = element(wb, i * cols + j);
      // e4m3 keeps 3 mantissa bits: |error| <= 2^-4 |x| for normals, 2^-10 s for subnormals;
      // BF16 adds 2^-9 |x|.
      const double bound = std::fabs(ref) * (0.0625 + 0.002) + s * 0.001 + 1e-7;
      worst = std::max(worst, std::fabs(real - ref) / bound);
    }
  EXPECT_LE(worst, 1.0);
}

}  // namespace
}  // namespace mla
