// `mla bench serve` end to end: against `mla serve` on a tiny checkpoint (the JSON has the
// documented keys, exact output lengths through ignore_eos, the model found via /v1/models), and
// its failures without a server (bad flags, nothing listening).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <thread>

#include "cli_run.h"
#include "temp_dir.h"

namespace {

using mla::test::run_mla;

// `mla serve --port 0` as a child process; its stderr goes to a file (a pipe nobody drains could
// fill and block the server), which is polled for the port and the "ready" line.
class ServerProcess {
 public:
  ServerProcess(const std::string& model, const std::string& log) {
    const std::string bin = mla::test::mla_binary();
    pid_ = fork();
    if (pid_ == 0) {
      // Only async-signal-safe calls between fork and exec (the test binary has threads).
      const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd < 0 || dup2(fd, 2) < 0) _exit(127);
      execl(bin.c_str(), bin.c_str(), "serve", "-m", model.c_str(), "--port", "0", "--threads", "1",
            static_cast<char*>(nullptr));
      _exit(127);
    }
    const std::regex listening("listening on (http://127\\.0\\.0\\.1:[0-9]+)");
    for (int i = 0; i < 600 && pid_ > 0; ++i) {  // up to a minute (sanitizer builds are slow)
      std::ifstream f(log);
      std::stringstream ss;
      ss << f.rdbuf();
      log_ = ss.str();
      std::smatch m;
      if (std::regex_search(log_, m, listening) && log_.find("ready") != std::string::npos) {
        url_ = m[1];
        return;
      }
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  ~ServerProcess() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    waitpid(pid_, nullptr, 0);
  }
  const std::string& url() const { return url_; }
  const std::string& log() const { return log_; }

 private:
  pid_t pid_ = -1;
  std::string url_, log_;
};

TEST(BenchServeCli, AgainstMlaServe) {
  mla::test::TempDir dir{"bench_serve"};
  const std::string model = dir.file("tiny");
  const auto made = run_mla("make-tiny --family v3 --seed 3 --out '" + model + "'", true);
  ASSERT_EQ(made.exit_code, 0) << made.out;
  ServerProcess server(model, dir.file("serve.log"));
  ASSERT_FALSE(server.url().empty()) << server.log();

  const auto r = run_mla("bench serve --base-url " + server.url() +
                             " --num-prompts 6 --request-rate 200 --max-concurrency 2"
                             " --input-len 12 --output-len 5 --seed 4 --json",
                         false);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("completed").get<int>(), 6);
  EXPECT_EQ(j.at("failed").get<int>(), 0);
  EXPECT_EQ(j.at("model").get<std::string>(), "tiny");    // from GET /v1/models
  EXPECT_EQ(j.at("total_output_tokens").get<int>(), 30);  // ignore_eos: exactly 5 each
  EXPECT_EQ(j.at("total_input_tokens").get<int>(), 72);
  EXPECT_TRUE(j.at("usage_reported").get<bool>());
  for (const char* k :
       {"duration_s", "request_throughput", "output_throughput", "total_token_throughput"})
    EXPECT_GT(j.at(k).get<double>(), 0.0) << k;
  for (const char* m : {"ttft", "tpot", "e2el"})
    for (const char* s : {"mean", "median", "p99"}) {
      const std::string key = std::string(s) + "_" + m + "_ms";
      EXPECT_GT(j.at(key).get<double>(), 0.0) << key;
    }
  EXPECT_LE(j.at("median_ttft_ms").get<double>(), j.at("p99_ttft_ms").get<double>());
  EXPECT_LE(j.at("mean_ttft_ms").get<double>(), j.at("mean_e2el_ms").get<double>());

  const auto table = run_mla("bench serve --base-url " + server.url() +
                                 " --model tiny --num-prompts 2 --input-len 4 --output-len 2",
                             false);
  ASSERT_EQ(table.exit_code, 0) << table.out;
  for (const char* w : {"Serving Benchmark Result", "Successful requests:", "Mean TTFT (ms):",
                        "P99 ITL (ms):", "Median TPOT (ms):"})
    EXPECT_NE(table.out.find(w), std::string::npos) << w;

  // vLLM's result lines and file (--save-result): peaks, chosen percentiles, per-request arrays.
  const std::string saved = dir.file("result.json");
  const auto full = run_mla("bench serve --base-url " + server.url() +
                                " --num-prompts 3 --input-len 4 --output-len 3 --request-rate 50"
                                " --metric-percentiles 50,90 --percentile-metrics ttft,e2el"
                                " --goodput e2el:60000 --save-result --result-filename '" +
                                saved + "'",
                            false);
  ASSERT_EQ(full.exit_code, 0) << full.out;
  for (const char* w : {"Request rate configured (RPS):", "Peak output token throughput (tok/s):",
                        "Peak concurrent requests:", "Request goodput (req/s):", "P90 TTFT (ms):",
                        "P50 E2EL (ms):"})
    EXPECT_NE(full.out.find(w), std::string::npos) << w;
  EXPECT_EQ(full.out.find("Mean TPOT"), std::string::npos);  // not among --percentile-metrics
  std::ifstream rf(saved);
  const auto res = nlohmann::json::parse(rf);
  EXPECT_EQ(res.at("output_lens"), nlohmann::json({3, 3, 3}));
  EXPECT_EQ(res.at("ttfts").size(), 3u);
  EXPECT_EQ(res.at("itls")[0].size(), 2u);  // 3 tokens: 2 gaps
  EXPECT_GT(res.at("max_output_tokens_per_s").get<double>(), 0.0);
  EXPECT_GE(res.at("max_concurrent_requests").get<double>(), 1.0);
  EXPECT_EQ(res.at("request_goodput").get<double>(), res.at("request_throughput").get<double>());
  EXPECT_GT(res.at("p90_ttft_ms").get<double>(), 0.0);

  // A ShareGPT file on the chat endpoint: conversations of two turns, token counts from the
  // model's tokenizer; the one-turn conversation is skipped.
  const std::string sharegpt = dir.file("sharegpt.json");
  std::ofstream(sharegpt) << R"([
    {"conversations": [{"from": "human", "value": "Tell me about the attention of MLA models."},
                       {"from": "gpt", "value": "It keeps a latent per token and layer."}]},
    {"conversations": [{"from": "human", "value": "What is a KV cache and why is it large?"},
                       {"from": "gpt", "value": "Keys and values of every past token, per head."}]},
    {"conversations": [{"from": "human", "value": "only one turn here"}]}])";
  const auto sg = run_mla("bench serve --base-url " + server.url() + " --dataset-path '" +
                              sharegpt + "' --tokenizer '" + model +
                              "' --endpoint /v1/chat/completions --num-prompts 5 --json",
                          false);
  ASSERT_EQ(sg.exit_code, 0) << sg.out;
  const auto sj = nlohmann::json::parse(sg.out.substr(sg.out.find('{')));
  EXPECT_EQ(sj.at("completed").get<int>(), 2);
  EXPECT_EQ(sj.at("dataset_name").get<std::string>(), "sharegpt");
  EXPECT_GT(sj.at("total_output_tokens").get<int>(), 2 * 4);

  const auto wrong = run_mla("bench serve --base-url " + server.url() +
                                 " --model nope --num-prompts 2 --input-len 4 --output-len 2",
                             true);
  EXPECT_NE(wrong.exit_code, 0);
  EXPECT_NE(wrong.out.find("HTTP 404"), std::string::npos) << wrong.out;
}

TEST(BenchServeCli, FailsWithoutAServerOrWithBadFlags) {
  // Port 1 on loopback: nothing listens there, so the connection is refused at once.
  const auto refused = run_mla("bench serve --base-url http://127.0.0.1:1 --num-prompts 2", true);
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.out.find("/v1/models"), std::string::npos) << refused.out;
  const auto rate = run_mla("bench serve --model m --request-rate fast", true);
  EXPECT_NE(rate.exit_code, 0);
  EXPECT_NE(rate.out.find("--request-rate"), std::string::npos) << rate.out;
  EXPECT_NE(run_mla("bench serve --model m --vocab-low 9 --vocab-high 9", true).exit_code, 0);
  EXPECT_NE(run_mla("bench serve --num-prompts 0", true).exit_code, 0);
}

}  // namespace
