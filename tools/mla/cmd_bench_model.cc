// `mla bench model`: a model's decode against the bound its weights set, tokens/s ≤ memory read
// bandwidth / active weight bytes per token, on a host whose bandwidth moves with its neighbours
// (a shared VM read 32 to 77 GB/s within minutes). So the read probe runs between segments of a
// few decode steps and each segment is held to the higher of the probes on its two sides, taken
// tens of milliseconds away rather than seconds: one `mla generate` paired with probes around the
// whole run mixed up the host's fast and slow spells (docs/BENCHMARKS.md "Model runtime").
// The prompt is ids 1 .. P; greedy decoding ignores EOS, so every run has the same length.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/machine_probe.h"
#include "bench/serve_stats.h"
#include "commands.h"
#include "core/kv_format.h"
#include "model/generator.h"
#include "runtime_flags.h"
#include "server/process_usage.h"

namespace mla::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct BenchModelOptions {
  std::string model;
  RuntimeFlags rt;  // only --attention-dtype, --prefill-path, --matmul-dtype, --lm-head-dtype,
                    // --weight-dtype, --repack and --moe-split are flags here
  int tokens = 64, segment = 4, warmup = 4, prompt_len = 16, threads = 0, sweeps = 3;
  int prefill_warmup = 1;
  bool json = false;
};

struct Segment {
  int tokens = 0;
  double seconds = 0, probe_before = 0, probe_after = 0;
  double tokens_per_s() const { return tokens / seconds; }
  double bound_gbps() const { return std::max(probe_before, probe_after); }
};

double median(const std::vector<double>& v) {
  return bench::percentile(v, 50);
}

int run_bench_model(const BenchModelOptions& o) {
  Result<RuntimeOptions> ro = runtime_options(o.rt);
  if (!ro.ok()) {
    fmt::print(stderr, "error: {}\n", ro.status().message());
    return 1;
  }
  const auto load_start = Clock::now();
  auto model = Model::load(o.model, *ro);
  const double load_seconds = std::chrono::duration<double>(Clock::now() - load_start).count();
  if (!model.ok()) {
    fmt::print(stderr, "error: {}\n", model.status().message());
    return 1;
  }
  const server::ProcessUsage loaded = server::process_usage();  // before any KV cache or run
  if (is_follower()) return follow_leader(**model, o.threads);
  const ModelConfig& c = (*model)->config();
  const double weight_bytes = double((*model)->active_weight_bytes_per_token());
  std::vector<int32_t> prompt(size_t(o.prompt_len));
  for (int i = 0; i < o.prompt_len; ++i) prompt[size_t(i)] = int32_t((i + 1) % c.vocab_size);

  ThreadPool pool(o.threads > 0 ? o.threads : default_thread_pool().num_threads());
  const bench::ReadBandwidthProbe probe;
  const int n_segments = (o.tokens + o.segment - 1) / o.segment;
  GenerateOptions go;
  go.max_new_tokens = 1 + o.warmup + n_segments * o.segment;  // the first comes from the prefill
  go.ignore_eos = true;

  // on_token runs between decode steps: the probes there are not in any segment's time.
  std::vector<Segment> segments;
  int steps = -1;  // decode steps done; the first token comes from the prefill
  double last_probe = 0;
  Clock::time_point t0;
  auto on_token = [&](int32_t) {
    ++steps;
    if (steps < o.warmup || (steps - o.warmup) % o.segment != 0) return;
    if (steps > o.warmup) {
      Segment s;
      s.tokens = o.segment;
      s.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
      s.probe_before = last_probe;
      segments.push_back(s);
    }
    last_probe = probe.measure_gbps(pool, pool.num_threads(), o.sweeps);
    if (!segments.empty() && segments.back().probe_after == 0)
      segments.back().probe_after = last_probe;
    t0 = Clock::now();
  };
  // Untimed prefills of the same prompt first (llama-bench warms up the same way): the first
  // prefill after load also pays the first touch of the activation buffers, which later ones
  // reuse (model_impl.h grown()).
  GenerateOptions warm;
  warm.max_new_tokens = 1;
  warm.ignore_eos = true;
  for (int i = 0; i < o.prefill_warmup; ++i)
    if (auto w = generate(**model, prompt, warm, pool); !w.ok()) {
      fmt::print(stderr, "error: {}\n", w.status().message());
      return 1;
    }
  auto r = generate(**model, prompt, go, pool, on_token);
  if (!r.ok()) {
    fmt::print(stderr, "error: {}\n", r.status().message());
    return 1;
  }

  std::vector<double> tps, eff, bound, frac;
  for (const Segment& s : segments) {
    tps.push_back(s.tokens_per_s());
    eff.push_back(s.tokens_per_s() * weight_bytes * 1e-9);
    bound.push_back(s.bound_gbps());
    frac.push_back(eff.back() / bound.back());
  }
  const double prefill_tps = r->prefill_seconds > 0 ? o.prompt_len / r->prefill_seconds : 0;
  // Prefill against the machine's peak for the products' math: the BF16 dot product (AMX tiles
  // are not used by the weight products) for --matmul-dtype bf16, else the FP32 FMA.
  const double prefill_gflops =
      r->prefill_seconds > 0 ? (*model)->prefill_flops(o.prompt_len) / r->prefill_seconds * 1e-9
                             : 0;
  // The highest of 3 quick probes: a shared host only ever slows a peak probe down (single quick
  // probes read as low as half the peak when the other core was busy).
  double peak_gflops = 0, int8_peak_gops = 0;
  for (int i = 0; i < 3; ++i) {
    const bench::MachineRates peak = bench::measure_machine(pool, true).all;
    peak_gflops = std::max(peak_gflops, o.rt.matmul_dtype == "bf16" && peak.bf16_dot_gflops > 0
                                            ? peak.bf16_dot_gflops
                                            : peak.fp32_fma_gflops);
    int8_peak_gops = std::max(int8_peak_gops, peak.int8_dot_gops);
  }
  const double prefill_fraction = peak_gflops > 0 ? prefill_gflops / peak_gflops : 0;
  // Block-quantised weights (a GGUF file, or requantised by --weight-dtype q8_0) run their
  // prefill products on integer dot products: their ceiling is the int8 probe's (vpdpbusd, twice
  // the BF16 dot product's; on AVX2 vpmaddubsw + vpmaddwd, ~1.3x the FMA's on Zen 3).
  const bool int8_products =
      o.rt.matmul_dtype == "bf16" && int8_peak_gops > 0 &&
      ((*model)->repack_stats().requantized > 0 || o.model.ends_with(".gguf"));
  const double int8_fraction = int8_peak_gops > 0 ? prefill_gflops / int8_peak_gops : 0;
  if (o.json) {
    nlohmann::ordered_json j;
    j["threads"] = pool.num_threads();
    j["active_weight_bytes_per_token"] = int64_t(weight_bytes);
    j["prompt_tokens"] = o.prompt_len;
    j["matmul_dtype"] = o.rt.matmul_dtype;
    j["kv_dtype"] = std::string(kv_cache_dtype_name(ro->kv_dtype));
    j["attention_dtype"] = dtype_flag_name(ro->attention_q_dtype);
    j["prefill_attention_dtype"] = dtype_flag_name(prefill_attention_dtype((*model)->options()));
    j["lm_head_dtype"] = weight_dtype_flag_name((*model)->lm_head_dtype());
    const Model::RepackStats rs = (*model)->repack_stats();
    j["load_seconds"] = load_seconds;
    j["loaded_resident_bytes"] = loaded.resident_bytes;
    j["loaded_resident_anon_bytes"] = loaded.resident_anon_bytes;
    j["loaded_resident_file_bytes"] = loaded.resident_file_bytes;
    j["weight_dtype"] = weight_dtype_held(**model);
    j["repacked_weights"] = rs.weights;
    j["requantized_weights"] = rs.requantized;
    j["repacked_bytes"] = rs.bytes;
    j["repack_seconds"] = rs.seconds;
    j["repacked_huge_page_bytes"] = rs.huge_page_bytes;
    j["repack_skipped_for_memory"] = rs.skipped_for_memory;
    j["prefill_tokens_per_s"] = prefill_tps;
    j["prefill_warmup"] = o.prefill_warmup;
    j["prefill_gflops"] = prefill_gflops;
    j["peak_gflops"] = peak_gflops;
    j["prefill_fraction_of_peak"] = prefill_fraction;
    j["int8_dot_peak_gops"] = int8_peak_gops;
    j["prefill_fraction_of_int8_peak"] = int8_fraction;
    j["decode_tokens_per_s"] = median(tps);
    j["effective_gbps"] = median(eff);
    j["probe_gbps"] = median(bound);
    j["ranks"] = (*model)->ranks();
    j["fraction"] = median(frac);
    j["fraction_min"] = *std::min_element(frac.begin(), frac.end());
    j["segments"] = nlohmann::json::array();
    for (size_t i = 0; i < segments.size(); ++i)
      j["segments"].push_back({{"tokens", segments[i].tokens},
                               {"seconds", segments[i].seconds},
                               {"tokens_per_s", tps[i]},
                               {"effective_gbps", eff[i]},
                               {"probe_gbps_before", segments[i].probe_before},
                               {"probe_gbps_after", segments[i].probe_after},
                               {"fraction", frac[i]}});
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  fmt::print(
      "loaded in {:.2f} s; resident {:.1f} MB ({:.1f} MB own memory, {:.1f} MB of mapped files)\n",
      load_seconds, loaded.resident_bytes / 1e6, loaded.resident_anon_bytes / 1e6,
      loaded.resident_file_bytes / 1e6);
  if (const Model::RepackStats rs = (*model)->repack_stats(); rs.weights > 0)
    fmt::print("repacked at load: {} weights{}, {:.1f} MB, in {:.2f} s{}\n", rs.weights,
               rs.requantized > 0 ? fmt::format(" ({} requantised as Q8_0)", rs.requantized) : "",
               rs.bytes / 1e6, rs.seconds,
               rs.huge_page_bytes < 0
                   ? ""
                   : fmt::format(", {:.0f}% on 2 MiB pages",
                                 100.0 * double(std::min(rs.huge_page_bytes, rs.bytes)) /
                                     double(std::max<int64_t>(rs.bytes, 1))));
  fmt::print(
      "weights read per decode token: {:.1f} MB; {} threads; prefill {} tokens: {:.1f} "
      "tokens/s, {:.1f} GFLOP/s = {:.3f} of the {:.1f} GFLOP/s {} peak{}\n",
      weight_bytes / 1e6, pool.num_threads(), o.prompt_len, prefill_tps, prefill_gflops,
      prefill_fraction, peak_gflops, o.rt.matmul_dtype == "bf16" ? "BF16 dot" : "FP32 FMA",
      int8_products ? fmt::format(" ({:.3f} of the {:.1f} GOP/s int8 dot peak its products run on)",
                                  int8_fraction, int8_peak_gops)
                    : "");
  fmt::print("{:>8} {:>10} {:>14} {:>12} {:>9}\n", "segment", "tokens/s", "effective GB/s",
             "probe GB/s", "fraction");
  for (size_t i = 0; i < segments.size(); ++i)
    fmt::print("{:>8} {:>10.2f} {:>14.1f} {:>12.1f} {:>9.3f}\n", i, tps[i], eff[i], bound[i],
               frac[i]);
  fmt::print("{:>8} {:>10.2f} {:>14.1f} {:>12.1f} {:>9.3f}\n", "median", median(tps), median(eff),
             median(bound), median(frac));
  return 0;
}

}  // namespace

void register_bench_model(CLI::App* bench, int* exit_code) {
  auto o = std::make_shared<BenchModelOptions>();
  CLI::App* cmd = bench->add_subcommand(
      "model", "Decode tokens/s of a model against memory bandwidth / active weight bytes");
  cmd->add_option("-m,--model", o->model,
                  "Model directory (config.json + safetensors) or .gguf file")
      ->required();
  cmd->add_option("--tokens", o->tokens, "Decode steps measured (default 64)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--segment", o->segment, "Decode steps between read probes (default 4)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--prefill-warmup", o->prefill_warmup,
                  "Untimed prefills of the prompt before the timed one (default 1)")
      ->check(CLI::Range(0, 100));
  cmd->add_option("--warmup", o->warmup, "Decode steps before the first segment (default 4)")
      ->check(CLI::Range(0, 1 << 20));
  add_kv_dtype_flag(cmd, &o->rt.kv_dtype);
  add_attention_dtype_flag(cmd, &o->rt.attention_dtype);
  add_prefill_path_flag(cmd, &o->rt.prefill_path);
  add_matmul_dtype_flag(cmd, &o->rt.matmul_dtype);
  add_lm_head_dtype_flag(cmd, &o->rt.lm_head_dtype);
  add_weight_dtype_flag(cmd, &o->rt.weight_dtype);
  add_repack_flag(cmd, &o->rt.repack);
  add_moe_split_flag(cmd, &o->rt.moe_split);
  cmd->add_option("--prompt-len", o->prompt_len, "Prompt tokens, ids 1 .. N (default 16)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--sweeps", o->sweeps, "256 MiB reads per probe, median (default 3)")
      ->check(CLI::Range(1, 100));
  cmd->add_option("--threads", o->threads, "Threads (default: MLA_NUM_THREADS or all)")
      ->check(CLI::Range(0, 1024));
  cmd->add_flag("--json", o->json, "Print the figures and every segment as JSON");
  cmd->callback([o, exit_code] { *exit_code = run_bench_model(*o); });
}

}  // namespace mla::cli
