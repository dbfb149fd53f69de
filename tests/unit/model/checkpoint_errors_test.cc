// Corrupt and inconsistent checkpoints (docs/RELIABILITY.md §Checklist R16, R18, R19): each is
// refused with one error line naming the file and tensor, never a crash. Every case starts from a
// valid make-tiny checkpoint and breaks exactly one thing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "checkpoint_test_util.h"
#include "model/model_weights.h"

namespace mla {
namespace {

namespace fs = std::filesystem;
using testing_model::Files;
using testing_model::make_tiny;
using testing_model::read_files;
using testing_model::TempDir;
using testing_model::write_files;

constexpr const char* kShard1 = "model-00001-of-00002.safetensors";
constexpr const char* kShard2 = "model-00002-of-00002.safetensors";
constexpr const char* kKvB = "model.layers.0.self_attn.kv_b_proj.weight";

// Loads `dir` and expects `code` with every fragment in one line.
void expect_error(const std::string& dir, StatusCode code,
                  std::initializer_list<std::string> fragments) {
  Result<ModelWeights> w = load_model_weights(dir);
  ASSERT_FALSE(w.ok()) << "loaded a corrupt checkpoint";
  const std::string& m = w.status().message();
  // MLA_PRINT_ERRORS=1 shows every message, to review their wording.
  if (std::getenv("MLA_PRINT_ERRORS")) std::fprintf(stderr, "%s\n", w.status().to_string().c_str());
  EXPECT_EQ(w.status().code(), code) << w.status().to_string();
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  for (const std::string& f : fragments)
    EXPECT_NE(m.find(f), std::string::npos) << f << " in\n" << m;
}

class CheckpointErrors : public ::testing::Test {
 protected:
  void SetUp() override { make_tiny(dir_.path(), "v3"); }  // FP8, 2 shards, MTP layer 4
  std::string index_path() const { return dir_.file(kCheckpointIndexFile); }
  void set_shard_of(const std::string& tensor, const std::string& file) {
    Files f = read_files(dir_.path());
    f.index["weight_map"][tensor] = file;
    write_files(dir_.path(), f);
  }
  TempDir dir_;
};

TEST_F(CheckpointErrors, ControlLoads) {
  Result<ModelWeights> w = load_model_weights(dir_.path());
  ASSERT_TRUE(w.ok()) << w.status().to_string();
}

TEST_F(CheckpointErrors, MissingTensor) {
  Files f = read_files(dir_.path());
  f.erase(kKvB);
  f.erase(std::string(kKvB) + "_scale_inv");
  write_files(dir_.path(), f);
  expect_error(dir_.path(), StatusCode::kNotFound,
               {dir_.path(), "\"model.layers.0.self_attn.kv_b_proj.weight\"", "is missing",
                "[H*(d_n+d_v), r] = [128, 48]"});
}

TEST_F(CheckpointErrors, WrongShape) {
  Files f = read_files(dir_.path());
  testing_model::TensorData& t = f.tensor(kKvB);
  t.shape = {96, 48};
  t.bytes.resize(96 * 48);
  write_files(dir_.path(), f);
  expect_error(dir_.path(), StatusCode::kInvalidArgument,
               {".safetensors: tensor \"model.layers.0.self_attn.kv_b_proj.weight\"",
                "has shape [96, 48], expected [128, 48] = [H*(d_n+d_v), r]"});
}

TEST_F(CheckpointErrors, ShardPathLeavingTheDirectory) {
  for (const std::string bad : {"../x.safetensors", "/etc/passwd", "sub/../../x", "..", "a/b"}) {
    SCOPED_TRACE(bad);
    set_shard_of(kKvB, bad);
    expect_error(dir_.path(), StatusCode::kInvalidArgument,
                 {kCheckpointIndexFile, "weight_map[\"" + std::string(kKvB) + "\"]",
                  "is not a plain file name inside the model directory"});
  }
}

TEST_F(CheckpointErrors, SymlinkOutOfTheDirectory) {
  TempDir elsewhere;
  fs::rename(dir_.file(kShard2), elsewhere.file(kShard2));
  fs::create_symlink(elsewhere.file(kShard2), dir_.file(kShard2));
  expect_error(dir_.path(), StatusCode::kInvalidArgument,
               {kShard2, "is a symlink to", "outside the model directory"});
  // A relative symlink climbing out is the same.
  fs::remove(dir_.file(kShard2));
  fs::create_symlink("../" + fs::path(elsewhere.path()).filename().string() + "/" + kShard2,
                     dir_.file(kShard2));
  expect_error(dir_.path(), StatusCode::kInvalidArgument, {"outside the model directory"});
}

TEST_F(CheckpointErrors, SymlinkInsideTheDirectoryIsFine) {
  fs::create_directory(dir_.file("blobs"));
  fs::rename(dir_.file(kShard2), dir_.file("blobs/abc"));
  fs::create_symlink("blobs/abc", dir_.file(kShard2));
  Result<ModelWeights> w = load_model_weights(dir_.path());
  EXPECT_TRUE(w.ok()) << w.status().to_string();
}

TEST_F(CheckpointErrors, MissingShard) {
  fs::remove(dir_.file(kShard2));
  expect_error(dir_.path(), StatusCode::kNotFound,
               {kCheckpointIndexFile, std::string("shard \"") + kShard2 + "\"", "listed for tensor",
                "does not exist"});
}

TEST_F(CheckpointErrors, TensorInTwoShards) {
  Files f = read_files(dir_.path());
  const testing_model::TensorData copy = f.tensor(kKvB);
  for (auto& [file, tensors] : f.shards)
    if (std::find_if(tensors.begin(), tensors.end(),
                     [](const auto& t) { return t.name == kKvB; }) == tensors.end())
      tensors.push_back(copy);
  write_files(dir_.path(), f);
  expect_error(dir_.path(), StatusCode::kDataLoss,
               {std::string("tensor \"") + kKvB + "\" is in two shards", kShard1, kShard2});
}

TEST_F(CheckpointErrors, TensorMissingFromTheMap) {
  Files f = read_files(dir_.path());
  f.index["weight_map"].erase(kKvB);
  write_files(dir_.path(), f);
  expect_error(dir_.path(), StatusCode::kDataLoss,
               {std::string("tensor \"") + kKvB + "\" is not in", "weight_map"});
}

TEST_F(CheckpointErrors, MapNamesATensorItsShardLacks) {
  set_shard_of("model.layers.0.bogus.weight", kShard1);
  expect_error(dir_.path(), StatusCode::kDataLoss,
               {"weight_map[\"model.layers.0.bogus.weight\"]", "has no tensor"});
  // A real tensor assigned to the wrong shard.
  make_tiny(dir_.path(), "v3");
  Files f = read_files(dir_.path());
  const std::string other =
      f.index["weight_map"][kKvB] == kShard1 ? std::string(kShard2) : std::string(kShard1);
  set_shard_of(kKvB, other);
  expect_error(dir_.path(), StatusCode::kDataLoss, {"has no tensor", "(it is in"});
}

TEST_F(CheckpointErrors, DuplicateKeyInWeightMap) {
  std::string text = testing_model::read_text(index_path());
  const std::string entry = "\"weight_map\": {";
  const size_t at = text.find(entry);
  ASSERT_NE(at, std::string::npos);
  text.insert(at + entry.size(), std::string("\"") + kKvB + "\": \"" + kShard1 + "\",");
  std::ofstream(index_path(), std::ios::trunc) << text;
  expect_error(dir_.path(), StatusCode::kInvalidArgument,
               {std::string("weight_map key \"") + kKvB + "\" appears twice"});
}

TEST_F(CheckpointErrors, MalformedIndex) {
  std::ofstream(index_path(), std::ios::trunc) << "{\"weight_map\": [1, 2]}";
  expect_error(dir_.path(), StatusCode::kInvalidArgument, {"\"weight_map\" must be an object"});
  std::ofstream(index_path(), std::ios::trunc) << "{\"weight_map\": {\"a\": 3}}";
  expect_error(dir_.path(), StatusCode::kInvalidArgument, {"must be a file name string"});
  std::ofstream(index_path(), std::ios::trunc) << "{not json";
  expect_error(dir_.path(), StatusCode::kInvalidArgument, {"not valid JSON"});
}

TEST_F(CheckpointErrors, Fp8WeightWithoutScale) {
  Files f = read_files(dir_.path());
  f.erase(std::string(kKvB) + "_scale_inv");
  write_files(dir_.path(), f);
  expect_error(dir_.path(), StatusCode::kNotFound,
               {std::string("F8_E4M3 weight \"") + kKvB + "\" has no \"" + kKvB + "_scale_inv\"",
                "[1, 1] F32 block scales"});
}

TEST_F(CheckpointErrors, ScaleOfWrongShapeOrDtype) {
  Files f = read_files(dir_.path());
  testing_model::TensorData& s = f.tensor("model.layers.0.mlp.gate_proj.weight_scale_inv");
  s.shape = {2, 2};  // [320, 192] needs [3, 2]: ceil(320/128) = 3
  s.bytes.resize(16);
  write_files(dir_.path(), f);
  expect_error(dir_.path(), StatusCode::kInvalidArgument,
               {"\"model.layers.0.mlp.gate_proj.weight_scale_inv\" is F32 [2, 2], expected F32 "
                "[3, 2] = [ceil(320/128), ceil(192/128)]"});
  f.tensor("model.layers.0.mlp.gate_proj.weight_scale_inv").dtype = DType::kBF16;
  f.tensor("model.layers.0.mlp.gate_proj.weight_scale_inv").shape = {3, 2};
  f.tensor("model.layers.0.mlp.gate_proj.weight_scale_inv").bytes.resize(12);
  write_files(dir_.path(), f);
  expect_error(dir_.path(), StatusCode::kInvalidArgument, {"is BF16 [3, 2], expected F32 [3, 2]"});
}

TEST_F(CheckpointErrors, BadDtype) {
  Files f = read_files(dir_.path());
  testing_model::TensorData& n = f.tensor("model.norm.weight");
  n.dtype = DType::kI16;  // same byte size as BF16
  write_files(dir_.path(), f);
  expect_error(dir_.path(), StatusCode::kInvalidArgument,
               {"\"model.norm.weight\" has dtype I16; a norm weight must be BF16, F16, F32"});
  // FP8 is for linear weights only.
  f.tensor("model.norm.weight").dtype = DType::kF8E4M3;
  f.tensor("model.norm.weight").bytes.resize(192);
  write_files(dir_.path(), f);
  expect_error(dir_.path(), StatusCode::kInvalidArgument, {"has dtype F8_E4M3; a norm weight"});
}

TEST_F(CheckpointErrors, UnknownTensorIsAnError) {
  Files f = read_files(dir_.path());
  f.shards[kShard1].push_back(
      {"model.layers.0.self_attn.q_proj.bias", DType::kF32, {2}, {0, 0, 0, 0, 0, 0, 0, 0}});
  f.index["weight_map"]["model.layers.0.self_attn.q_proj.bias"] = kShard1;
  write_files(dir_.path(), f);
  expect_error(dir_.path(), StatusCode::kInvalidArgument,
               {"unexpected tensor \"model.layers.0.self_attn.q_proj.bias\"",
                "deepseek_v3 model as config.json describes it does not use it"});
}

TEST_F(CheckpointErrors, LayerPastTheConfigIsAnError) {
  // The MTP layer 4 is allowed by num_nextn_predict_layers 1; with 0 it is an extra layer.
  std::string cfg = testing_model::read_text(dir_.file("config.json"));
  const std::string key = "\"num_nextn_predict_layers\": 1";
  ASSERT_NE(cfg.find(key), std::string::npos);
  cfg.replace(cfg.find(key), key.size(), "\"num_nextn_predict_layers\": 0");
  std::ofstream(dir_.file("config.json"), std::ios::trunc) << cfg;
  expect_error(dir_.path(), StatusCode::kInvalidArgument,
               {"unexpected tensor \"model.layers.4.", "layer 4 is past num_hidden_layers 4"});
}

TEST_F(CheckpointErrors, ConfigWithMoreLayersThanTheFiles) {
  make_tiny(dir_.path(), "v2-lite");  // 3 layers, BF16
  std::string cfg = testing_model::read_text(dir_.file("config.json"));
  const std::string key = "\"num_hidden_layers\": 3";
  ASSERT_NE(cfg.find(key), std::string::npos);
  cfg.replace(cfg.find(key), key.size(), "\"num_hidden_layers\": 4");
  std::ofstream(dir_.file("config.json"), std::ios::trunc) << cfg;
  expect_error(dir_.path(), StatusCode::kNotFound,
               {"\"model.layers.3.input_layernorm.weight\" ([D] = [192]) is missing"});
}

TEST_F(CheckpointErrors, AbsurdExpertCountIsRefusedBeforeBuildingTheList) {
  std::string cfg = testing_model::read_text(dir_.file("config.json"));
  const std::string key = "\"n_routed_experts\": 8";
  cfg.replace(cfg.find(key), key.size(), "\"n_routed_experts\": 16000000");
  std::ofstream(dir_.file("config.json"), std::ios::trunc) << cfg;
  expect_error(dir_.path(), StatusCode::kInvalidArgument,
               {"config.json implies", "n_routed_experts 16000000", "holds only"});
}

TEST_F(CheckpointErrors, ScaleOnABf16Weight) {
  make_tiny(dir_.path(), "v2-lite", 1);
  Files f = read_files(dir_.path());
  f.shards[kSingleCheckpointFile].push_back(
      {std::string(kKvB) + "_scale_inv", DType::kF32, {1, 1}, {0, 0, 128, 63}});
  write_files(dir_.path(), f);
  expect_error(dir_.path(), StatusCode::kInvalidArgument,
               {"a block scale for a weight that is not F8_E4M3"});
}

TEST_F(CheckpointErrors, BothLayoutsOrNone) {
  fs::copy_file(dir_.file(kShard1), dir_.file(kSingleCheckpointFile));
  expect_error(dir_.path(), StatusCode::kInvalidArgument, {"holds both", "ambiguous"});
  for (const char* f : {kShard1, kShard2, kSingleCheckpointFile, kCheckpointIndexFile})
    fs::remove(dir_.file(f));
  expect_error(dir_.path(), StatusCode::kNotFound, {"no model.safetensors or"});
}

TEST_F(CheckpointErrors, TruncatedShard) {
  fs::resize_file(dir_.file(kShard2), fs::file_size(dir_.file(kShard2)) - 10);
  expect_error(dir_.path(), StatusCode::kDataLoss, {kShard2});
}

}  // namespace
}  // namespace mla
