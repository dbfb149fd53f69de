// Runs the built `mla generate` ($MLA_BINARY): a make-tiny model of each weight format generates,
// reports its figures and dumps activations; corrupt or inconsistent checkpoints give one clear
// error line and a non-zero exit, never a crash.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "checkpoint_test_util.h"
#include "cli_run.h"
#include "io/safetensors.h"

namespace mla {
namespace {

namespace fs = std::filesystem;

// Rewrites a JSON file of a model directory through `edit`.
template <class Edit>
void edit_json(const fs::path& path, Edit edit) {
  std::ifstream in(path);
  auto j = nlohmann::json::parse(in);
  in.close();
  edit(j);
  std::ofstream(path) << j.dump();
}

class GenerateCli : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(test::mla_binary())) << test::mla_binary() << " is not built";
  }
  std::string make(const std::string& family, const std::string& extra = "") {
    const std::string out = dir_.file(family + extra.substr(0, 5));
    const test::RunResult r = test::run_mla(
        "make-tiny --family " + family + " " + extra + " --seed 3 --out '" + out + "'", true);
    EXPECT_EQ(r.exit_code, 0) << r.out;
    return out;
  }
  // Exactly one line on stderr starting with "error:", and a non-zero exit.
  void expect_one_error_line(const std::string& model, const std::string& needle) {
    const test::RunResult r =
        test::run_mla("generate -m '" + model + "' --tokens 1,2,3 -n 2", true);
    EXPECT_EQ(r.exit_code, 1) << r.out;
    EXPECT_EQ(r.out.rfind("error: ", 0), 0u) << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
    EXPECT_NE(r.out.find(needle), std::string::npos) << r.out;
  }
  testing_model::TempDir dir_;
};

TEST_F(GenerateCli, RunsBf16AndFp8ModelsAndReportsFigures) {
  for (const std::string extra : {"--bf16", "--fp8"}) {
    const std::string m = make("v3", extra);
    const test::RunResult r = test::run_mla(
        "generate -m '" + m + "' -p 'Hello the world' -n 6 --ignore-eos --json", false);
    ASSERT_EQ(r.exit_code, 0) << r.out;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["generated"].size(), 6u);
    EXPECT_EQ(j["finish_reason"], "length");
    // A fresh prompt: the decompressed path (kernels/mla_attention.h, PrefillPathRule::kCost).
    EXPECT_EQ(j["chunks"][0]["path"], "decompressed");
    EXPECT_GT(j["kv_bytes_used"].get<int64_t>(), 0);
    EXPECT_GT(j["active_weight_bytes_per_token"].get<int64_t>(), 0);
  }
}

// --attention-dtype bf16 runs the absorbed decode on the BF16 kernels (AMX where present) for
// the decode steps and the prompt on the decompressed path's BF16 tiles; an unknown value is
// refused by the flag parser.
TEST_F(GenerateCli, RunsTheBf16AttentionKernels) {
  const std::string m = make("v2-lite");
  const test::RunResult r = test::run_mla(
      "generate -m '" + m + "' --tokens 1,2,3,4,5 -n 5 --ignore-eos --attention-dtype bf16 --json",
      false);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["generated"].size(), 5u);
  EXPECT_EQ(j["attention_dtype"], "bf16");
  EXPECT_EQ(j["chunks"][0]["path"], "decompressed");
  const test::RunResult bad =
      test::run_mla("generate -m '" + m + "' --tokens 1,2 -n 1 --attention-dtype fp16", true);
  EXPECT_NE(bad.exit_code, 0) << bad.out;
  EXPECT_NE(bad.out.find("--attention-dtype"), std::string::npos) << bad.out;
}

// --attention-dtype int8 decodes on the BF16 kernels (over this BF16 cache) and runs the
// decompressed prefill's tiles on int8 dot products; unset, the prefill tiles follow the query's
// dtype (bf16) except under
// --weight-dtype q8_0, whose products already run on int8. The JSON names both.
TEST_F(GenerateCli, NamesThePrefillAttentionDtype) {
  const std::string m = make("v2-lite", "--fp8");
  std::string ids = "1";
  for (int i = 2; i <= 40; ++i) ids += "," + std::to_string(i);
  const std::string args =
      "generate -m '" + m + "' --tokens " + ids + " -n 2 --ignore-eos --prefill-threshold 0 --json";
  struct Want {
    std::string flags, attention, prefill;
  };
  for (const Want& w : {Want{"", "bf16", "bf16"}, Want{" --attention-dtype int8", "bf16", "int8"},
                        Want{" --weight-dtype q8_0", "bf16", "int8"},
                        Want{" --weight-dtype q8_0 --attention-dtype bf16", "bf16", "bf16"},
                        Want{" --attention-dtype f32", "f32", "f32"}}) {
    const test::RunResult r = test::run_mla(args + w.flags, false);
    ASSERT_EQ(r.exit_code, 0) << w.flags << ": " << r.out;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["attention_dtype"], w.attention) << w.flags;
    EXPECT_EQ(j["prefill_attention_dtype"], w.prefill) << w.flags;
    EXPECT_EQ(j["chunks"][0]["path"], "decompressed") << w.flags;
    EXPECT_EQ(j["generated"].size(), 2u) << w.flags;
  }
}

// --prefill-path forces one path on every chunk, a fresh prompt's included (by default it runs
// decompressed); another value is refused by the flag parser.
TEST_F(GenerateCli, PrefillPathForcesThePath) {
  const std::string m = make("v2-lite");
  const std::string args = "generate -m '" + m + "' --tokens 1,2,3,4,5,6 -n 1 --ignore-eos --json";
  for (const std::string path : {"absorbed", "decompressed"}) {
    const test::RunResult r = test::run_mla(args + " --prefill-path " + path, false);
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_EQ(nlohmann::json::parse(r.out)["chunks"][0]["path"], path);
  }
  const test::RunResult plain = test::run_mla(args, false);
  ASSERT_EQ(plain.exit_code, 0) << plain.out;
  EXPECT_EQ(nlohmann::json::parse(plain.out)["chunks"][0]["path"], "decompressed");
  const test::RunResult bad = test::run_mla(args + " --prefill-path both", true);
  EXPECT_NE(bad.exit_code, 0) << bad.out;
  EXPECT_NE(bad.out.find("--prefill-path"), std::string::npos) << bad.out;
}

// --weight-dtype q8_0 requantises the FP8 checkpoint's products at load (lm_head too): the JSON
// says so, and the bytes a token reads change (lm_head BF16 → Q8_0 shrinks, the FP8 weights grow
// by 1/16 with their f16 scales). Another value is refused by the flag parser.
TEST_F(GenerateCli, RequantisesTheWeightsAsQ8_0) {
  const std::string m = make("v3", "--fp8");
  const std::string args = "generate -m '" + m + "' --tokens 1,2,3,4,5 -n 4 --ignore-eos --json";
  const test::RunResult plain = test::run_mla(args, false);
  const test::RunResult q8 = test::run_mla(args + " --weight-dtype q8_0", false);
  ASSERT_EQ(plain.exit_code, 0) << plain.out;
  ASSERT_EQ(q8.exit_code, 0) << q8.out;
  const auto a = nlohmann::json::parse(plain.out), b = nlohmann::json::parse(q8.out);
  EXPECT_EQ(a["weight_dtype"], "checkpoint");
  EXPECT_EQ(a["requantized_weights"], 0);
  EXPECT_EQ(b["weight_dtype"], "q8_0");
  EXPECT_EQ(b["lm_head_dtype"], "q8_0");
  EXPECT_GT(b["requantized_weights"].get<int>(), 0);
  EXPECT_EQ(b["generated"].size(), 4u);
  EXPECT_NE(b["active_weight_bytes_per_token"].get<int64_t>(),
            a["active_weight_bytes_per_token"].get<int64_t>());
  const test::RunResult bad =
      test::run_mla("generate -m '" + m + "' --tokens 1,2 -n 1 --weight-dtype q4_0", true);
  EXPECT_NE(bad.exit_code, 0) << bad.out;
  EXPECT_NE(bad.out.find("--weight-dtype"), std::string::npos) << bad.out;
}

TEST_F(GenerateCli, StreamsTextAndReportsThePathOfEachChunk) {
  const std::string m = make("v2-lite");
  auto run = [&](int threshold) {
    return test::run_mla("generate -m '" + m +
                             "' -p 'The latent cache of attention' -n 4 --ignore-eos "
                             "--prefill-chunk 3 --prefill-threshold " +
                             std::to_string(threshold),
                         true);
  };
  const test::RunResult r = run(2);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("decompressed path"), std::string::npos) << r.out;  // 3-token chunks
  EXPECT_EQ(r.out.find("absorbed path"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tokens/s"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("KV cache:"), std::string::npos) << r.out;
  // At threshold 256 the first chunk (no cached context) is decompressed and the later ones,
  // short beside their context, absorbed.
  const test::RunResult both = run(256);
  ASSERT_EQ(both.exit_code, 0) << both.out;
  EXPECT_NE(both.out.find("decompressed path"), std::string::npos) << both.out;
  EXPECT_NE(both.out.find("absorbed path"), std::string::npos) << both.out;
}

TEST_F(GenerateCli, DumpsActivationsForTheOracle) {
  const std::string m = make("moonlight");
  const std::string d = dir_.file("dump");
  const test::RunResult r = test::run_mla(
      "generate -m '" + m + "' --tokens 5,6,7,8 -n 3 --ignore-eos --dump-activations '" + d + "'",
      true);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto f = SafetensorsFile::open(d + "/activations.safetensors");
  ASSERT_TRUE(f.ok()) << f.status().message();
  ASSERT_TRUE(f->find("logits"));
  EXPECT_EQ(f->find("logits")->shape, (std::vector<int64_t>{4, 320}));
  EXPECT_EQ(f->find("decode_logits")->shape, (std::vector<int64_t>{2, 320}));
  EXPECT_EQ(f->find("hidden.0")->shape, (std::vector<int64_t>{4, 192}));
  EXPECT_EQ(f->find("generated")->shape, (std::vector<int64_t>{3}));
}

TEST_F(GenerateCli, CorruptCheckpointsGiveOneErrorLine) {
  {  // a shard cut short
    const std::string m = make("v3");
    const fs::path shard = fs::path(m) / "model-00002-of-00002.safetensors";
    fs::resize_file(shard, fs::file_size(shard) - 100);
    expect_one_error_line(m, "model-00002-of-00002.safetensors");
  }
  {  // a missing FP8 scale: rename it in the index so the weight has none
    const std::string m = make("kimi-k2");
    const fs::path idx = fs::path(m) / "model.safetensors.index.json";
    std::ifstream in(idx);
    std::string text((std::istreambuf_iterator<char>(in)), {});
    in.close();
    const std::string key = "model.layers.0.self_attn.o_proj.weight_scale_inv";
    const size_t at = text.find("\"" + key + "\"");
    ASSERT_NE(at, std::string::npos);
    text.replace(at + 1, key.size(), "model.layers.0.self_attn.o_proj.bogus_scale");
    std::ofstream(idx) << text;
    expect_one_error_line(m, "o_proj");
  }
  {  // a config that disagrees with the tensors
    const std::string m = make("v2");
    edit_json(fs::path(m) / "config.json", [](nlohmann::json& j) { j["kv_lora_rank"] = 64; });
    expect_one_error_line(m, "has shape");
  }
  {  // a shard name that leaves the directory
    const std::string m = make("v2-lite");
    edit_json(fs::path(m) / "model.safetensors.index.json", [](nlohmann::json& j) {
      j["weight_map"]["model.norm.weight"] = "../model-00001-of-00002.safetensors";
    });
    expect_one_error_line(m, "..");
  }
  expect_one_error_line(dir_.file("nothing-here"), "nothing-here");
}

}  // namespace
}  // namespace mla
