// Tests of the expected-tensor table against the released checkpoints' numbers, written out by
// hand from docs/MODELS.md §Checkpoint shapes (independent of the code that derives them).
#include "model/weight_layout.h"

#include <gtest/gtest.h>

#include <map>

namespace mla {
namespace {

std::map<std::string, std::vector<int64_t>> shapes_of(const std::vector<ExpectedTensor>& list) {
  std::map<std::string, std::vector<int64_t>> m;
  for (const ExpectedTensor& e : list) EXPECT_TRUE(m.emplace(e.name, e.shape).second) << e.name;
  return m;
}

using Shape = std::vector<int64_t>;

TEST(WeightLayout, V3ShapesAndScaleGrids) {
  const ModelConfig c = model_preset("v3").value();
  const auto m = shapes_of(expected_tensors(c));
  const std::string a = "model.layers.5.self_attn.";
  EXPECT_EQ(m.at(a + "q_a_proj.weight"), (Shape{1536, 7168}));
  EXPECT_EQ(m.at(a + "q_a_layernorm.weight"), (Shape{1536}));
  EXPECT_EQ(m.at(a + "q_b_proj.weight"), (Shape{24576, 1536}));
  EXPECT_EQ(m.at(a + "kv_a_proj_with_mqa.weight"), (Shape{576, 7168}));
  EXPECT_EQ(m.at(a + "kv_b_proj.weight"), (Shape{32768, 512}));
  EXPECT_EQ(m.at(a + "o_proj.weight"), (Shape{7168, 16384}));
  EXPECT_EQ(m.at("model.layers.2.mlp.gate_proj.weight"), (Shape{18432, 7168}));
  EXPECT_EQ(m.at("model.layers.2.mlp.down_proj.weight"), (Shape{7168, 18432}));
  EXPECT_EQ(m.count("model.layers.2.mlp.gate.weight"), 0u);  // layers 0-2 dense
  EXPECT_EQ(m.at("model.layers.3.mlp.gate.weight"), (Shape{256, 7168}));
  EXPECT_EQ(m.at("model.layers.3.mlp.gate.e_score_correction_bias"), (Shape{256}));
  EXPECT_EQ(m.at("model.layers.60.mlp.experts.255.up_proj.weight"), (Shape{2048, 7168}));
  EXPECT_EQ(m.at("model.layers.60.mlp.experts.255.down_proj.weight"), (Shape{7168, 2048}));
  EXPECT_EQ(m.at("model.layers.60.mlp.shared_experts.gate_proj.weight"), (Shape{2048, 7168}));
  EXPECT_EQ(m.at("lm_head.weight"), (Shape{129280, 7168}));
  EXPECT_EQ(m.count("model.layers.61.input_layernorm.weight"), 0u);  // MTP is not listed
  // The scale shapes of docs/MODELS.md §Checkpoint shapes, including the ragged 576 rows → 5.
  EXPECT_EQ(fp8_scale_shape(c, {576, 7168}), (Shape{5, 56}));
  EXPECT_EQ(fp8_scale_shape(c, {24576, 1536}), (Shape{192, 12}));
  EXPECT_EQ(fp8_scale_shape(c, {7168, 16384}), (Shape{56, 128}));
  EXPECT_EQ(fp8_scale_shape(c, {576, 300}), (Shape{5, 3}));
}

// The R1 checkpoint holds 91,991 tensors (docs/MODELS.md §Checkpoint shapes): the expected ones,
// the MTP module, and one scale per FP8 weight.
TEST(WeightLayout, V3TensorCountMatchesTheReleasedCheckpoint) {
  const ModelConfig c = model_preset("v3").value();
  const std::vector<ExpectedTensor> main = expected_tensors(c), mtp = mtp_tensors(c);
  EXPECT_EQ(count_expected_tensors(c), int64_t(main.size()));
  int64_t scales = 0;
  for (const auto* list : {&main, &mtp})
    for (const ExpectedTensor& e : *list) scales += e.fp8_in_release;
  EXPECT_EQ(int64_t(main.size() + mtp.size()) + scales, 91991);
  const auto m = shapes_of(mtp);
  EXPECT_EQ(m.at("model.layers.61.eh_proj.weight"), (Shape{7168, 14336}));
  EXPECT_EQ(m.at("model.layers.61.shared_head.head.weight"), (Shape{129280, 7168}));
  EXPECT_EQ(m.at("model.layers.61.mlp.experts.0.gate_proj.weight"), (Shape{2048, 7168}));
}

TEST(WeightLayout, KimiV2LiteV2Moonlight) {
  auto k2 = shapes_of(expected_tensors(model_preset("kimi-k2").value()));
  EXPECT_EQ(k2.at("model.layers.1.self_attn.q_b_proj.weight"), (Shape{12288, 1536}));
  EXPECT_EQ(k2.at("model.layers.1.self_attn.kv_b_proj.weight"), (Shape{16384, 512}));
  EXPECT_EQ(k2.at("model.layers.1.self_attn.o_proj.weight"), (Shape{7168, 8192}));
  EXPECT_EQ(k2.at("model.layers.1.mlp.gate.weight"), (Shape{384, 7168}));
  EXPECT_EQ(k2.at("model.embed_tokens.weight"), (Shape{163840, 7168}));

  auto lite = shapes_of(expected_tensors(model_preset("v2-lite").value()));
  EXPECT_EQ(lite.at("model.layers.0.self_attn.q_proj.weight"), (Shape{3072, 2048}));
  EXPECT_EQ(lite.count("model.layers.0.self_attn.q_a_proj.weight"), 0u);
  EXPECT_EQ(lite.at("model.layers.0.mlp.gate_proj.weight"), (Shape{10944, 2048}));
  EXPECT_EQ(lite.at("model.layers.26.mlp.experts.63.gate_proj.weight"), (Shape{1408, 2048}));
  EXPECT_EQ(lite.at("model.layers.26.mlp.shared_experts.down_proj.weight"), (Shape{2048, 2816}));
  EXPECT_EQ(lite.count("model.layers.1.mlp.gate.e_score_correction_bias"), 0u);  // greedy

  auto v2 = shapes_of(expected_tensors(model_preset("v2").value()));
  EXPECT_EQ(v2.at("model.layers.0.self_attn.o_proj.weight"), (Shape{5120, 16384}));
  EXPECT_EQ(v2.at("model.layers.59.mlp.shared_experts.gate_proj.weight"), (Shape{3072, 5120}));

  auto moon = shapes_of(expected_tensors(model_preset("moonlight").value()));
  EXPECT_EQ(moon.at("model.layers.0.mlp.gate_proj.weight"), (Shape{11264, 2048}));
  EXPECT_EQ(moon.at("model.layers.1.mlp.gate.e_score_correction_bias"), (Shape{64}));
}

TEST(WeightLayout, TiedEmbeddingsDropLmHead) {
  ModelConfig c = model_preset("v2-lite").value();
  c.tie_word_embeddings = true;
  const auto m = shapes_of(expected_tensors(c));
  EXPECT_EQ(m.count("lm_head.weight"), 0u);
  EXPECT_EQ(count_expected_tensors(c), int64_t(m.size()));
}

TEST(WeightLayout, LayerIndexOf) {
  EXPECT_EQ(layer_index_of("model.layers.61.eh_proj.weight"), 61);
  EXPECT_EQ(layer_index_of("model.layers.0.mlp.gate.weight"), 0);
  EXPECT_EQ(layer_index_of("model.norm.weight"), std::nullopt);
  EXPECT_EQ(layer_index_of("model.layers.x.a"), std::nullopt);
  EXPECT_EQ(layer_index_of("model.layers.01.a"), std::nullopt);
  EXPECT_EQ(layer_index_of("model.layers.12345678901.a"), std::nullopt);
  EXPECT_EQ(layer_index_of("model.layers.7"), std::nullopt);
}

TEST(WeightLayout, QuoteNameEscapesAndCuts) {
  EXPECT_EQ(quote_name("a\"b\n"), "\"a\\\"b\\n\"");
  EXPECT_LT(quote_name(std::string(10000, 'x')).size(), 220u);
}

}  // namespace
}  // namespace mla
