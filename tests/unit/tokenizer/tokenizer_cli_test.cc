// Runs the built `mla tokenize`, `mla detokenize` and `mla chat-format` on the real DeepSeek-V3
// files: ids, JSON output, special-token parsing only with --special, streaming, and the error
// paths (missing source, bad ids, unknown template) exiting non-zero with a message.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "cli_run.h"
#include "tokenizer_test_util.h"

namespace mla::tok {
namespace {

using test::mla_binary;
using CliRun = test::RunResult;
CliRun run(const std::string& args) {
  return test::run_mla(args, /*merge_stderr=*/true);
}

class TokenizerCli : public ::testing::Test {
 protected:
  void SetUp() override {
    // CTest sets MLA_BINARY to this build's `mla`: a missing binary is a failure, not a skip.
    ASSERT_TRUE(std::filesystem::exists(mla_binary())) << "no binary at " << mla_binary();
    if (!std::filesystem::exists(testing_util::v3_json()))
      GTEST_SKIP() << "missing " << testing_util::v3_json();
  }
  const std::string model = "-m '" + testing_util::v3_dir() + "'";
};

TEST_F(TokenizerCli, Tokenize) {
  CliRun r = run("tokenize " + model + " --text 'Hello! 毕老师！1 + 1 = 2'");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.out, "19923,3,223,5464,5008,1175,19,940,223,19,438,223,20\n");
  r = run("tokenize --tokenizer '" + testing_util::v3_json() + "' --text 'Hi<｜User｜>' --json");
  EXPECT_EQ(r.out, "{\"ids\":[23166,30,28217,6756,28217,32]}\n");
  r = run("tokenize " + model + " --text 'Hi<｜User｜>' --special --bos");
  EXPECT_EQ(r.out, "0,23166,128803\n");
}

TEST_F(TokenizerCli, Detokenize) {
  CliRun r = run("detokenize " + model + " --ids 0,23166,128803 --skip-special");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.out, "Hi<｜User｜>\n");  // <｜User｜> is an added token not marked special
  r = run("detokenize " + model + " --ids 5464,5008 --stream");
  EXPECT_EQ(r.out, "\"毕\"\n\"老师\"\n\"\"\n");
  r = run("detokenize " + model + " --ids 1,999999");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("999999"), std::string::npos) << r.out;
  r = run("detokenize " + model + " --ids 1,x");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("item 1"), std::string::npos) << r.out;
}

TEST_F(TokenizerCli, ChatFormat) {
  const std::string path = ::testing::TempDir() + "/mla_chat_messages.json";
  std::ofstream(path) << R"({"messages": [{"role": "system", "content": "You are helpful"},
                                         {"role": "user", "content": "Hi"}]})";
  CliRun r = run("chat-format " + model + " --messages '" + path + "' --json");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(
      r.out,
      "{\"format\":\"deepseek-v3\",\"prompt\":\"<｜begin▁of▁sentence｜>You are "
      "helpful<｜User｜>Hi<｜Assistant｜>\",\"ids\":[0,3476,477,11502,128803,23166,128804]}\n");
  r = run("chat-format --tokenizer '" + testing_util::v3_json() + "' --messages '" + path + "'");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("--chat-format"), std::string::npos) << r.out;
  r = run("chat-format --tokenizer '" + testing_util::v3_json() + "' --messages '" + path +
          "' --chat-format kimi-k2");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("<|im_system|>"), std::string::npos) << r.out;
}

TEST_F(TokenizerCli, Errors) {
  CliRun r = run("tokenize --text hi");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("-m DIR or --tokenizer"), std::string::npos) << r.out;
  r = run("tokenize --tokenizer /nonexistent.json --text hi");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("/nonexistent.json"), std::string::npos) << r.out;
  r = run("tokenize --tokenizer '" + testing_util::v3_json() + "' --text hi --bos");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("BOS"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace mla::tok
