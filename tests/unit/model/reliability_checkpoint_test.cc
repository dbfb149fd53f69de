// docs/RELIABILITY.md §Checklist R15-R20 on whole model directories, the cases
// checkpoint_errors_test.cc and model_config_test.cc leave out: bad shard names reported with their
// value, dangling and non-file shards, config errors read from the directory (and reported before
// any shard is opened), vocab_size against embed_tokens / lm_head rows, every MLA projection and
// expert weight with a wrong shape or missing, FP8 scale grids against weight_block_size, NaN / Inf
// weights loading, and a tokenizer with ids past the model's embedding rows. Every case starts from
// a valid make-tiny checkpoint and breaks one thing.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "checkpoint_test_util.h"
#include "cli_run.h"
#include "model/model_runtime.h"
#include "model/model_weights.h"
#include "model/weight_layout.h"

namespace mla {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using testing_model::Files;
using testing_model::make_tiny;
using testing_model::read_files;
using testing_model::TempDir;
using testing_model::TensorData;
using testing_model::write_files;

constexpr const char* kShard1 = "model-00001-of-00002.safetensors";
constexpr const char* kShard2 = "model-00002-of-00002.safetensors";
constexpr const char* kKvB = "model.layers.0.self_attn.kv_b_proj.weight";

// One line, the code, and every fragment.
::testing::AssertionResult failed_with(const Status& s, StatusCode code,
                                       std::initializer_list<std::string> fragments) {
  // MLA_PRINT_ERRORS=1 shows every message, to review their wording.
  if (std::getenv("MLA_PRINT_ERRORS")) std::fprintf(stderr, "%s\n", s.to_string().c_str());
  if (s.ok()) return ::testing::AssertionFailure() << "loaded a bad model directory";
  auto fail = ::testing::AssertionFailure() << s.to_string() << ": ";
  bool bad = false;
  if (s.code() != code) {
    fail << "code is not " << status_code_name(code) << "; ";
    bad = true;
  }
  if (s.message().find('\n') != std::string::npos) {
    fail << "message spans lines; ";
    bad = true;
  }
  for (const std::string& f : fragments)
    if (s.message().find(f) == std::string::npos) {
      fail << "lacks [" << f << "]; ";
      bad = true;
    }
  if (bad) return fail;
  return ::testing::AssertionSuccess();
}

Status load_status(const std::string& dir) {
  return load_model_weights(dir).status();
}

void edit_json(const std::string& path, const std::function<void(Json&)>& edit) {
  Json j;
  {
    std::ifstream in(path);
    j = Json::parse(in);
  }
  edit(j);
  std::ofstream(path, std::ios::trunc) << j.dump(2);
}

size_t elem_bytes(DType t) {
  switch (t) {
    case DType::kF64:
    case DType::kI64:
      return 8;
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kF16:
    case DType::kBF16:
    case DType::kI16:
      return 2;
    default:
      return 1;
  }
}

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

void reshape(TensorData& t, std::vector<int64_t> shape) {
  t.shape = std::move(shape);
  t.bytes.assign(size_t(numel(t.shape)) * elem_bytes(t.dtype), 0);
}

// The first tensor of a decoder layer (not the MTP layer) whose name ends with `suffix`, or the
// tensor named exactly `suffix`.
std::string find_name(const Files& f, const std::string& suffix, int num_layers) {
  for (const auto& [file, tensors] : f.shards)
    for (const TensorData& t : tensors) {
      if (t.name == suffix) return t.name;
      const std::optional<int64_t> layer = layer_index_of(t.name);
      if (layer && *layer < num_layers && t.name.size() > suffix.size() &&
          t.name.compare(t.name.size() - suffix.size(), suffix.size(), suffix) == 0)
        return t.name;
    }
  ADD_FAILURE() << "no tensor ending in " << suffix;
  return suffix;
}

class ReliabilityCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override { make_tiny(dir_.path(), "v3"); }  // FP8, 2 shards, 4 layers + MTP
  std::string config_path() const { return dir_.file("config.json"); }
  TempDir dir_;
};

// ---- item 15: a truncated shard names the shard, the tensor and the cut ----

TEST_F(ReliabilityCheckpoint, Item15TruncatedShardNamesTheTensor) {
  fs::resize_file(dir_.file(kShard1), fs::file_size(dir_.file(kShard1)) / 2);
  EXPECT_TRUE(failed_with(load_status(dir_.path()), StatusCode::kDataLoss,
                          {dir_.file(kShard1), "tensor \"", "past the end", "truncated"}));
}

// ---- item 16: shard names and files ----

TEST_F(ReliabilityCheckpoint, Item16BadShardNamesAreQuotedInTheMessage) {
  const std::string abs_inside = dir_.file(kShard1);  // absolute, though it points inside
  for (const std::string bad : {std::string("../x.safetensors"), std::string("/etc/passwd"),
                                std::string("sub/../../x"), abs_inside, std::string("."),
                                std::string(""), std::string("a\0b", 3), std::string(300, 'x')}) {
    SCOPED_TRACE(bad);
    edit_json(dir_.file(kCheckpointIndexFile), [&](Json& j) { j["weight_map"][kKvB] = bad; });
    const Status s = load_status(dir_.path());
    EXPECT_TRUE(failed_with(s, StatusCode::kInvalidArgument,
                            {kCheckpointIndexFile, std::string("weight_map[\"") + kKvB + "\"]",
                             "not a plain file name"}));
    if (bad.size() < 100 && bad.find('\0') == std::string::npos) {
      EXPECT_NE(s.message().find("\"" + bad + "\""), std::string::npos)
          << "the value is not named: " << s.message();
    }
  }
}

TEST_F(ReliabilityCheckpoint, Item16DanglingSymlinkAndDirectoryShards) {
  fs::remove(dir_.file(kShard2));
  fs::create_symlink(dir_.file("nowhere.safetensors"), dir_.file(kShard2));
  EXPECT_TRUE(failed_with(load_status(dir_.path()), StatusCode::kNotFound, {kShard2}));
  fs::remove(dir_.file(kShard2));
  fs::create_directory(dir_.file(kShard2));
  const Status s = load_status(dir_.path());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(kShard2), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.message();
}

TEST_F(ReliabilityCheckpoint, Item16SymlinkToAFileOutsideEvenThroughADirectoryLink) {
  TempDir elsewhere;
  fs::rename(dir_.file(kShard2), elsewhere.file(kShard2));
  fs::create_directory_symlink(elsewhere.path(), dir_.file("link"));
  // The shard name is plain, the symlink goes through an in-directory link to a directory outside.
  fs::create_symlink("link/" + std::string(kShard2), dir_.file(kShard2));
  EXPECT_TRUE(failed_with(load_status(dir_.path()), StatusCode::kInvalidArgument,
                          {kShard2, "outside the model directory"}));
}

TEST_F(ReliabilityCheckpoint, Item16ShardNotListedIsNeverOpened) {
  // A stray garbage .safetensors file next to the index is ignored: only listed shards count.
  std::ofstream(dir_.file("stray.safetensors")) << "garbage";
  EXPECT_TRUE(load_status(dir_.path()).ok());
}

// ---- item 17: config.json read from the model directory ----

TEST_F(ReliabilityCheckpoint, Item17ConfigErrorsNameThePathFieldAndValue) {
  struct Case {
    std::function<void(Json&)> edit;
    std::string field, value;
    StatusCode code = StatusCode::kInvalidArgument;
  };
  const std::vector<Case> cases = {
      {[](Json& j) { j.erase("kv_lora_rank"); }, "\"kv_lora_rank\"", "missing"},
      {[](Json& j) { j["hidden_size"] = "192"; }, "\"hidden_size\"", "\"192\""},
      {[](Json& j) { j["num_attention_heads"] = 0; }, "\"num_attention_heads\"", "0"},
      {[](Json& j) { j["q_lora_rank"] = -160; }, "\"q_lora_rank\"", "-160"},
      {[](Json& j) { j["qk_rope_head_dim"] = -8; }, "\"qk_rope_head_dim\"", "-8"},
      {[](Json& j) { j["num_experts_per_tok"] = 9; }, "\"num_experts_per_tok\" (9)", "(8)"},
      {[](Json& j) { j["first_k_dense_replace"] = 5; }, "\"first_k_dense_replace\" (5)", "(4)"},
      {[](Json& j) { j["max_position_embeddings"] = int64_t{1} << 61; },
       "\"max_position_embeddings\"", "2305843009213693952"},
      {[](Json& j) { j["rope_scaling"]["factor"] = -1.0; }, "\"rope_scaling.factor\"", "-1"},
      {[](Json& j) { j["rope_scaling"]["factor"] = 0; }, "\"rope_scaling.factor\"", "0"},
      {[](Json& j) { j["torch_dtype"] = "float8"; }, "\"torch_dtype\"", "\"float8\""},
      {[](Json& j) { j["quantization_config"]["quant_method"] = "gptq"; },
       "\"quantization_config.quant_method\"", "gptq", StatusCode::kUnimplemented},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.field);
    make_tiny(dir_.path(), "v3");
    edit_json(config_path(), c.edit);
    EXPECT_TRUE(
        failed_with(load_status(dir_.path()), c.code, {config_path() + ": ", c.field, c.value}));
  }
}

TEST_F(ReliabilityCheckpoint, Item17ConfigIsCheckedBeforeAnyShardIsOpened) {
  // Both the config and a shard are bad: the config error comes back, so nothing was mapped or
  // sized from the config before it was validated.
  fs::resize_file(dir_.file(kShard1), 3);
  edit_json(config_path(), [](Json& j) { j["num_hidden_layers"] = -4; });
  EXPECT_TRUE(failed_with(load_status(dir_.path()), StatusCode::kInvalidArgument,
                          {config_path(), "\"num_hidden_layers\"", "-4"}));
}

TEST_F(ReliabilityCheckpoint, Item17ConfigErrorsThroughModelLoad) {
  edit_json(config_path(), [](Json& j) { j["max_position_embeddings"] = int64_t{1} << 62; });
  Result<std::unique_ptr<Model>> m = Model::load(dir_.path());
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(failed_with(m.status(), StatusCode::kInvalidArgument,
                          {config_path(), "\"max_position_embeddings\"", "4611686018427387904"}));
}

TEST_F(ReliabilityCheckpoint, Item17VocabSizeAgainstEmbeddingRows) {
  for (int64_t vocab : {319, 321, 640}) {
    SCOPED_TRACE(vocab);
    make_tiny(dir_.path(), "v3");
    edit_json(config_path(), [&](Json& j) { j["vocab_size"] = vocab; });
    EXPECT_TRUE(failed_with(load_status(dir_.path()), StatusCode::kInvalidArgument,
                            {"\"model.embed_tokens.weight\"", "has shape [320, 192]",
                             "expected [" + std::to_string(vocab) + ", 192] = [vocab_size, D]"}));
  }
  // lm_head alone with other rows.
  make_tiny(dir_.path(), "v3");
  Files f = read_files(dir_.path());
  reshape(f.tensor("lm_head.weight"), {321, 192});
  write_files(dir_.path(), f);
  EXPECT_TRUE(failed_with(
      load_status(dir_.path()), StatusCode::kInvalidArgument,
      {"\"lm_head.weight\"", "has shape [321, 192]", "expected [320, 192] = [vocab_size, D]"}));
}

// ---- item 18: every MLA projection, norm, router and expert weight ----

struct ShapeCase {
  const char* family;
  const char* suffix;
};

class ShapeChecks : public ::testing::TestWithParam<ShapeCase> {
 protected:
  TempDir dir_;
};

std::vector<ShapeCase> shape_cases() {
  std::vector<ShapeCase> v;
  for (const char* s : {"model.embed_tokens.weight",
                        "lm_head.weight",
                        "model.norm.weight",
                        "self_attn.q_a_proj.weight",
                        "self_attn.q_a_layernorm.weight",
                        "self_attn.q_b_proj.weight",
                        "self_attn.kv_a_proj_with_mqa.weight",
                        "self_attn.kv_a_layernorm.weight",
                        "self_attn.kv_b_proj.weight",
                        "self_attn.o_proj.weight",
                        "input_layernorm.weight",
                        "post_attention_layernorm.weight",
                        "mlp.gate_proj.weight",
                        "mlp.down_proj.weight",
                        "mlp.gate.weight",
                        "mlp.gate.e_score_correction_bias",
                        "mlp.experts.0.gate_proj.weight",
                        "mlp.experts.7.up_proj.weight",
                        "mlp.experts.3.down_proj.weight",
                        "mlp.shared_experts.up_proj.weight",
                        "mlp.shared_experts.down_proj.weight"})
    v.push_back({"v3", s});
  v.push_back({"v2-lite", "self_attn.q_proj.weight"});
  v.push_back({"v2-lite", "self_attn.kv_a_proj_with_mqa.weight"});
  return v;
}

std::string shape_case_name(const ::testing::TestParamInfo<ShapeCase>& i) {
  std::string n = std::string(i.param.family) + "_" + i.param.suffix;
  for (char& c : n)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
}

TEST_P(ShapeChecks, Item18WrongShapeTransposedOrMissing) {
  const ShapeCase& p = GetParam();
  make_tiny(dir_.path(), p.family, 2, TinyWeights::kBF16);
  Result<ModelConfig> cfg = load_model_config(dir_.path());
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  Files f = read_files(dir_.path());
  const std::string name = find_name(f, p.suffix, cfg->num_hidden_layers);
  const std::vector<int64_t> good = f.tensor(name).shape;

  // One more row.
  std::vector<int64_t> bigger = good;
  bigger[0] += 1;
  reshape(f.tensor(name), bigger);
  write_files(dir_.path(), f);
  EXPECT_TRUE(failed_with(load_status(dir_.path()), StatusCode::kInvalidArgument,
                          {"tensor \"" + name + "\"", "has shape " + shape_text(bigger),
                           "expected " + shape_text(good) + " = ["}));

  // Transposed (a [out, in] matrix stored as [in, out]).
  if (good.size() == 2 && good[0] != good[1]) {
    reshape(f.tensor(name), {good[1], good[0]});
    write_files(dir_.path(), f);
    EXPECT_TRUE(
        failed_with(load_status(dir_.path()), StatusCode::kInvalidArgument,
                    {"tensor \"" + name + "\"", "has shape " + shape_text({good[1], good[0]}),
                     "expected " + shape_text(good)}));
  }

  // Rank changed: [n] as [1, n].
  std::vector<int64_t> ranked = good;
  ranked.insert(ranked.begin(), 1);
  reshape(f.tensor(name), ranked);
  write_files(dir_.path(), f);
  EXPECT_TRUE(failed_with(load_status(dir_.path()), StatusCode::kInvalidArgument,
                          {"tensor \"" + name + "\"", "expected " + shape_text(good)}));

  // Missing.
  make_tiny(dir_.path(), p.family, 2, TinyWeights::kBF16);
  f = read_files(dir_.path());
  f.erase(name);
  write_files(dir_.path(), f);
  EXPECT_TRUE(failed_with(load_status(dir_.path()), StatusCode::kNotFound,
                          {"\"" + name + "\"", "is missing", shape_text(good)}));
}

INSTANTIATE_TEST_SUITE_P(Tensors, ShapeChecks, ::testing::ValuesIn(shape_cases()), shape_case_name);

// ---- item 19: FP8 block scales ----

TEST_F(ReliabilityCheckpoint, Item19ScaleGridTransposed) {
  const std::string scale = "model.layers.0.mlp.gate_proj.weight_scale_inv";  // [320, 192]
  Files f = read_files(dir_.path());
  ASSERT_EQ(f.tensor(scale).shape, (std::vector<int64_t>{3, 2}));
  reshape(f.tensor(scale), {2, 3});
  write_files(dir_.path(), f);
  EXPECT_TRUE(failed_with(load_status(dir_.path()), StatusCode::kInvalidArgument,
                          {"\"" + scale + "\"", "is F32 [2, 3], expected F32 [3, 2]"}));
}

TEST_F(ReliabilityCheckpoint, Item19ScaleGridAgainstAnotherBlockSize) {
  // The files hold 128x128 grids; a config claiming 64x64 blocks must not be believed.
  edit_json(config_path(), [](Json& j) {
    j["quantization_config"]["weight_block_size"] = {64, 64};
  });
  EXPECT_TRUE(failed_with(load_status(dir_.path()), StatusCode::kInvalidArgument,
                          {"_scale_inv\"", "expected F32", "/64)"}));
}

TEST_F(ReliabilityCheckpoint, Item19ScaleUnderTheWrongName) {
  Files f = read_files(dir_.path());
  TensorData s = f.tensor(std::string(kKvB) + "_scale_inv");
  f.erase(std::string(kKvB) + "_scale_inv");
  s.name = std::string(kKvB) + "_scale";
  f.shards[kShard1].push_back(s);
  f.index["weight_map"][s.name] = kShard1;
  write_files(dir_.path(), f);
  const Status st = load_status(dir_.path());
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message().find('\n'), std::string::npos);
  EXPECT_NE(st.message().find(kKvB), std::string::npos) << st.message();
}

// ---- item 20: NaN and Inf are valid weights ----

TEST_F(ReliabilityCheckpoint, Item20NanAndInfWeightsLoad) {
  for (TinyWeights w : {TinyWeights::kBF16, TinyWeights::kFP8}) {
    SCOPED_TRACE(w == TinyWeights::kBF16 ? "bf16" : "fp8");
    make_tiny(dir_.path(), "v3", 2, w);
    Files f = read_files(dir_.path());
    TensorData& kvb = f.tensor(kKvB);
    if (kvb.dtype == DType::kBF16) {
      const uint8_t nan[2] = {0xc0, 0x7f}, inf[2] = {0x80, 0x7f}, ninf[2] = {0x80, 0xff};
      std::memcpy(kvb.bytes.data(), nan, 2);
      std::memcpy(kvb.bytes.data() + 2, inf, 2);
      std::memcpy(kvb.bytes.data() + 4, ninf, 2);
    } else {
      ASSERT_EQ(kvb.dtype, DType::kF8E4M3);
      kvb.bytes[0] = 0x7f;  // E4M3 NaN
      kvb.bytes[1] = 0xff;
      TensorData& scale = f.tensor(std::string(kKvB) + "_scale_inv");
      const float inf = std::numeric_limits<float>::infinity();
      std::memcpy(scale.bytes.data(), &inf, 4);
    }
    TensorData& norm = f.tensor("model.norm.weight");
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const uint8_t bf16_nan[2] = {0xc1, 0xff};  // negative NaN with a payload
    if (norm.dtype == DType::kF32) std::memcpy(norm.bytes.data(), &nan, 4);
    if (norm.dtype == DType::kBF16) std::memcpy(norm.bytes.data(), bf16_nan, 2);
    write_files(dir_.path(), f);
    Result<ModelWeights> mw = load_model_weights(dir_.path());
    EXPECT_TRUE(mw.ok()) << mw.status().to_string();
    Result<std::unique_ptr<Model>> m = Model::load(dir_.path());
    EXPECT_TRUE(m.ok()) << m.status().to_string();
  }
}

// ---- item 27 (model side): a tokenizer whose ids run past the embedding rows ----

TEST_F(ReliabilityCheckpoint, Item27TokenizerIdsPastTheEmbeddingRowsFailAtLoad) {
  ASSERT_TRUE(fs::exists(test::mla_binary())) << test::mla_binary() << " is not built";
  // The tiny model has vocab_size 320 and tokenizer ids 0..316; add one at 320.
  edit_json(dir_.file("tokenizer.json"), [](Json& j) {
    j["added_tokens"].push_back({{"id", 320},
                                 {"content", "<|extra|>"},
                                 {"single_word", false},
                                 {"lstrip", false},
                                 {"rstrip", false},
                                 {"normalized", false},
                                 {"special", true}});
  });
  const test::RunResult r =
      test::run_mla({"generate", "-m", dir_.path(), "-p", "Hello", "-n", "1"});
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_EQ(r.out.rfind("error: ", 0), 0u) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  EXPECT_NE(r.out.find(dir_.file("tokenizer.json")), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("320"), std::string::npos) << r.out;

  // serve refuses to start (bounded by `timeout`: a serve that starts would wait for a signal).
  const std::string cmd = "timeout 60 " + test::shell_quote(test::mla_binary()) + " serve -m " +
                          test::shell_quote(dir_.path()) + " --port 0 2>&1";
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << status << ": " << out;
  EXPECT_NE(out.find("error: " + dir_.file("tokenizer.json")), std::string::npos) << out;
}

}  // namespace
}  // namespace mla
