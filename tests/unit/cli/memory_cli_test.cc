// Runs the built `mla memory` binary: the V2 example of docs/kernels/kv_formats.md §Memory per
// token as JSON and as a table, and the error paths (bad flag, missing --model file, --model with
// --preset) exit non-zero with a message. Skipped when the binary has not been built (the test does
// not build it).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_run.h"

namespace {

using mla::test::mla_binary;
using mla::test::RunResult;
RunResult run(const std::string& args, bool merge_stderr) {
  return mla::test::run_mla(args, merge_stderr);
}

class MemoryCli : public testing::Test {
 protected:
  void SetUp() override {
    // CTest sets MLA_BINARY to this build's `mla`; a missing binary is a failure, not a skip.
    ASSERT_TRUE(std::filesystem::exists(mla_binary())) << mla_binary() << " is not built";
  }
};

TEST_F(MemoryCli, V2ExampleJson) {
  RunResult r = run("memory --preset v2 --context 65536 --batch 16 --layers 60 --json", false);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(j["context"], 65536);
  EXPECT_EQ(j["batch"], 16);
  EXPECT_EQ(j["layers"], 60);
  EXPECT_EQ(j["page_size"], 64);
  EXPECT_EQ(j["model"]["num_attention_heads"], 128);
  EXPECT_EQ(j["model"]["kv_lora_rank"], 512);
  EXPECT_EQ(j["model"]["qk_rope_head_dim"], 64);
  const nlohmann::json& l = j["layouts"];
  ASSERT_EQ(l.size(), 6u);
  EXPECT_EQ(l[0]["name"], "mha");
  EXPECT_EQ(l[0]["bytes_per_token_layer"], 65536);
  EXPECT_EQ(l[0]["total_bytes"], 4123168604160);
  EXPECT_EQ(l[0]["total_gib"], 3840.0);  // 3.75 TiB
  EXPECT_EQ(l[1]["name"], "gqa8");
  EXPECT_EQ(l[1]["total_bytes"], 257698037760);
  EXPECT_EQ(l[1]["total_gib"], 240.0);
  EXPECT_EQ(l[2]["name"], "mla_bf16");
  EXPECT_EQ(l[2]["bytes_per_token_layer"], 1152);
  EXPECT_EQ(l[2]["total_bytes"], 72477573120);
  EXPECT_EQ(l[2]["total_gib"], 67.5);
  EXPECT_EQ(l[2]["pages_per_sequence"], 1024);
  EXPECT_EQ(l[2]["saved_vs_mha_percent"], 98.2421875);
  EXPECT_EQ(l[3]["name"], "mla_fp8_e4m3");
  EXPECT_EQ(l[3]["bytes_per_token_layer"], 656);
  EXPECT_EQ(l[4]["name"], "mla_int8");
  EXPECT_EQ(l[4]["bytes_per_token_layer"], 656);
  EXPECT_EQ(l[5]["name"], "mla_nvfp4");
  EXPECT_EQ(l[5]["bytes_per_token_layer"], 416);
  for (const auto& layout : l) {
    for (const char* key : {"bytes_per_sequence", "total_gb", "pages_per_sequence"})
      EXPECT_TRUE(layout.contains(key)) << key;
  }
}

TEST_F(MemoryCli, V2ExampleTable) {
  RunResult r = run("memory --preset v2 --context 65536 --batch 16 --layers 60", false);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  for (const char* s :
       {"3.75 TiB", "240 GiB", "67.5 GiB", "98.24%", "60 layers", "65,536", "batch 16", "GB"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s << " not in\n" << r.out;
}

TEST_F(MemoryCli, BadFlagFails) {
  RunResult r = run("memory --no-such-flag", true);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("--no-such-flag"), std::string::npos) << r.out;
  r = run("memory --context 0", true);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("--context"), std::string::npos) << r.out;
  r = run("memory --preset v9", true);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("v9"), std::string::npos) << r.out;
}

TEST_F(MemoryCli, MissingModelFileFails) {
  RunResult r = run("memory --model /nonexistent/mla_model_dir", true);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("/nonexistent/mla_model_dir"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("error"), std::string::npos) << r.out;
}

TEST_F(MemoryCli, ModelAndPresetTogetherFail) {
  RunResult r = run("memory --model /tmp --preset v3", true);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("excludes"), std::string::npos) << r.out;
}

// Any command: a mistyped MLA_ISA or MLA_NUM_THREADS stops the start with the variable and its
// value named (core/env_check.h), rather than running with the setting silently ignored.
TEST_F(MemoryCli, BadEnvironmentIsAnError) {
  for (const auto& [name, value] :
       {std::pair{"MLA_ISA", "avx9"}, std::pair{"MLA_NUM_THREADS", "two"}}) {
    const char* outer = std::getenv(name);
    const std::string saved = outer ? outer : "";
    setenv(name, value, 1);
    RunResult r = run("memory --preset v2 --json", true);
    if (outer)
      setenv(name, saved.c_str(), 1);
    else
      unsetenv(name);
    EXPECT_EQ(r.exit_code, 2) << name;
    EXPECT_NE(r.out.find(std::string(name) + " is \"" + value + "\""), std::string::npos) << r.out;
  }
  RunResult ok = run("memory --preset v2 --json", true);
  EXPECT_EQ(ok.exit_code, 0) << ok.out;
}

TEST_F(MemoryCli, HugeContextIsAnErrorNotAWrap) {
  RunResult r = run("memory --preset v3 --context 4611686018427387904", true);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("overflow"), std::string::npos) << r.out;
}

}  // namespace
