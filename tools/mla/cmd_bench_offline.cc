// `mla bench offline`: N requests of random prompt ids through the serving engine at once (no
// HTTP; vLLM's `--request-rate inf` with ignore_eos for exact lengths), then throughput and the
// latency distribution: requests/s, input and output tokens/s, TTFT and TPOT (mean, p50, p99),
// preemptions, prefix-cache hit rate. A table on stdout, or one JSON object with --json.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "commands.h"
#include "runtime_flags.h"
#include "sched/engine.h"

namespace mla::cli {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::ordered_json;

struct OfflineOptions {
  std::string model;
  int num_prompts = 64, input_len = 128, output_len = 32, prefix_len = 0;
  int max_num_seqs = 128, max_num_batched_tokens = 2048, long_prefill_token_threshold = 0;
  int page_size = 64, threads = 0;
  int64_t num_blocks = 0;
  double kv_cache_gib = 1.0;
  RuntimeFlags rt;
  uint64_t seed = 0;
  bool json = false;
};

struct Summary {
  double mean = 0, p50 = 0, p99 = 0;
};

// Nearest-rank percentiles (the value at rank ceil(p·n)), in milliseconds.
Summary summarize_ms(std::vector<double> seconds) {
  Summary s;
  if (seconds.empty()) return s;
  std::sort(seconds.begin(), seconds.end());
  const auto rank = [&](double p) {
    const size_t r = size_t(std::ceil(p * double(seconds.size())));
    return seconds[std::clamp<size_t>(r, 1, seconds.size()) - 1] * 1e3;
  };
  for (double v : seconds) s.mean += v;
  s.mean = s.mean / double(seconds.size()) * 1e3;
  s.p50 = rank(0.50);
  s.p99 = rank(0.99);
  return s;
}

ordered_json summary_json(const Summary& s) {
  return {{"mean", s.mean}, {"p50", s.p50}, {"p99", s.p99}};
}

int fail(const Status& s) {
  fmt::print(stderr, "mla bench offline: {}\n", s.message());
  return 1;
}

// What the callbacks record per request (on the engine thread; read after every stream ended).
struct Timeline {
  Clock::time_point first_token, done;
  int64_t tokens = 0;
  bool ok = false;
  std::string error;
};

int run_offline(const OfflineOptions& o) {
  if (Status one = require_one_rank("bench offline"); !one.ok()) return fail(one);
  Result<RuntimeOptions> ro = runtime_options(o.rt);
  if (!ro.ok()) return fail(ro.status());
  fmt::print(stderr, "loading {}...\n", o.model);
  auto model = Model::load(o.model, *ro);
  if (!model.ok()) return fail(model.status());
  const int64_t vocab = (*model)->config().vocab_size;

  sched::EngineOptions eo;
  eo.scheduler.max_num_seqs = o.max_num_seqs;
  eo.scheduler.max_num_batched_tokens = o.max_num_batched_tokens;
  eo.scheduler.long_prefill_token_threshold = o.long_prefill_token_threshold;
  eo.page_size = o.page_size;
  eo.num_blocks = int32_t(std::min<int64_t>(o.num_blocks, INT32_MAX));
  eo.kv_cache_bytes = uint64_t(o.kv_cache_gib * double(1ull << 30));
  ThreadPool pool(o.threads > 0 ? o.threads : default_thread_pool().num_threads());
  auto engine = sched::Engine::create(**model, eo, nullptr, &pool);
  if (!engine.ok()) return fail(engine.status());

  // Prompts: random ids, the first prefix_len shared by all (a system prompt).
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<int32_t> id(0, int32_t(vocab - 1));
  std::vector<int32_t> prefix(size_t(std::min(o.prefix_len, o.input_len)));
  for (int32_t& t : prefix) t = id(rng);
  std::vector<sched::Request> reqs(size_t(o.num_prompts));
  for (sched::Request& r : reqs) {
    r.prompt = prefix;
    while (int(r.prompt.size()) < o.input_len) r.prompt.push_back(id(rng));
    r.max_tokens = o.output_len;
    r.ignore_eos = true;
  }

  fmt::print(stderr, "running {} requests ({} in, {} out, {} KV pages of {})...\n", o.num_prompts,
             o.input_len, o.output_len, (*engine)->num_blocks(), (*engine)->page_size());
  std::vector<Timeline> tl(reqs.size());
  std::vector<std::shared_ptr<sched::RequestStream>> streams;
  const Clock::time_point t0 = Clock::now();
  for (size_t i = 0; i < reqs.size(); ++i) {
    Timeline* t = &tl[i];
    auto s = (*engine)->submit(std::move(reqs[i]), [t](const sched::RequestEvent& ev) {
      const Clock::time_point now = Clock::now();
      if (t->tokens == 0 && !ev.token_ids.empty()) t->first_token = now;
      t->tokens += int64_t(ev.token_ids.size());
      if (ev.finish != sched::FinishReason::kNone) {
        t->done = now;
        t->ok =
            ev.finish == sched::FinishReason::kLength || ev.finish == sched::FinishReason::kStop;
        t->error = ev.error;
      }
    });
    if (!s.ok()) return fail(s.status());
    streams.push_back(*s);
  }
  for (auto& s : streams) s->wait();  // orders the callbacks' writes before the reads below
  const Clock::time_point t1 = Clock::now();

  std::vector<double> ttft, tpot;
  int64_t out_tokens = 0;
  for (const Timeline& t : tl) {
    if (!t.ok) return fail(invalid_argument("a request failed: " + t.error));
    out_tokens += t.tokens;
    const double first = std::chrono::duration<double>(t.first_token - t0).count();
    const double e2e = std::chrono::duration<double>(t.done - t0).count();
    ttft.push_back(first);
    if (t.tokens > 1) tpot.push_back((e2e - first) / double(t.tokens - 1));
  }
  const double elapsed = std::chrono::duration<double>(t1 - t0).count();
  const sched::EngineMetrics m = (*engine)->metrics();
  const Summary s_ttft = summarize_ms(ttft), s_tpot = summarize_ms(tpot);
  const double hit_rate =
      m.prefix_cache_queries > 0 ? double(m.prefix_cache_hits) / double(m.prefix_cache_queries) : 0;
  const double rps = double(o.num_prompts) / elapsed;
  const double in_tps = double(int64_t(o.num_prompts) * o.input_len) / elapsed;
  const double out_tps = double(out_tokens) / elapsed;
  if (o.json) {
    ordered_json j = {{"requests_per_s", rps},
                      {"input_tokens_per_s", in_tps},
                      {"output_tokens_per_s", out_tps},
                      {"ttft_ms", summary_json(s_ttft)},
                      {"tpot_ms", summary_json(s_tpot)},
                      {"preemptions", m.num_preemptions},
                      {"prefix_cache_hit_rate", hit_rate},
                      {"elapsed_s", elapsed},
                      {"steps", m.steps},
                      {"absorbed_chunks", m.absorbed_chunks},
                      {"decompressed_chunks", m.decompressed_chunks}};
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  fmt::print("requests        {:>10}   in {} s ({} engine steps)\n", o.num_prompts, elapsed,
             m.steps);
  fmt::print("requests/s      {:>10.3f}\n", rps);
  fmt::print("input tok/s     {:>10.1f}\n", in_tps);
  fmt::print("output tok/s    {:>10.1f}\n", out_tps);
  fmt::print("{:<15} {:>10} {:>10} {:>10}\n", "ms", "mean", "p50", "p99");
  for (const auto& [name, s] : {std::pair{"TTFT", s_ttft}, std::pair{"TPOT", s_tpot}})
    fmt::print("{:<15} {:>10.2f} {:>10.2f} {:>10.2f}\n", name, s.mean, s.p50, s.p99);
  fmt::print("preemptions     {:>10}\n", m.num_preemptions);
  fmt::print("prefix hit rate {:>10.3f}\n", hit_rate);
  fmt::print("prefill chunks  {:>10} absorbed, {} decompressed\n", m.absorbed_chunks,
             m.decompressed_chunks);
  return 0;
}

}  // namespace

// Called by register_bench (cmd_bench.cc) with the `bench` subcommand.
void register_bench_offline(CLI::App* bench, int* exit_code) {
  auto o = std::make_shared<OfflineOptions>();
  CLI::App* cmd = bench->add_subcommand(
      "offline", "Throughput and latency of N requests through the serving engine (no HTTP)");
  cmd->add_option("-m,--model", o->model,
                  "Model directory (config.json + safetensors) or .gguf file")
      ->required();
  cmd->add_option("--num-prompts", o->num_prompts, "Requests")->check(CLI::PositiveNumber);
  cmd->add_option("--input-len", o->input_len, "Prompt tokens per request")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--output-len", o->output_len, "Generated tokens per request (EOS ignored)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--prefix-len", o->prefix_len,
                  "Leading prompt tokens shared by every request (prefix caching)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-num-seqs", o->max_num_seqs, "Running requests at most")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-num-batched-tokens", o->max_num_batched_tokens, "Tokens per step")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--long-prefill-token-threshold", o->long_prefill_token_threshold,
                  "Largest prefill chunk of one request (0: the step budget)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--page-size", o->page_size, "Tokens per KV page");
  cmd->add_option("--num-blocks", o->num_blocks, "KV pages (default: --kv-cache-gib)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--kv-cache-gib", o->kv_cache_gib, "KV cache size when --num-blocks is 0")
      ->check(CLI::PositiveNumber);
  add_runtime_flags(cmd, &o->rt);
  cmd->add_option("--threads", o->threads, "Threads (default: MLA_NUM_THREADS or all)");
  cmd->add_option("--seed", o->seed, "Seed of the random prompts");
  cmd->add_flag("--json", o->json, "One JSON object on stdout");
  cmd->callback([o, exit_code] { *exit_code = run_offline(*o); });
}

}  // namespace mla::cli
