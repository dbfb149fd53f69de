// `mla bench machine | decode | prefill | threshold` and `mla tune`: the machine's measured
// limits and the MLA kernels and paths against them (src/bench); `mla bench offline` (the serving
// engine) is cmd_bench_offline.cc, `mla bench serve` (an HTTP load generator) cmd_bench_serve.cc,
// `mla bench model` (a model's decode against the weight-bandwidth bound) cmd_bench_model.cc.
// Progress goes to stderr, the results to stdout (a table, or JSON with --json).
#include <fmt/format.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/kernel_bench.h"
#include "bench/machine_probe.h"
#include "commands.h"
#include "core/kv_format.h"
#include "io/tune_file.h"
#include "kernels/mla_attention.h"
#include "runtime_flags.h"

namespace mla::cli {
namespace {

using nlohmann::ordered_json;

ordered_json rates_json(const bench::MachineRates& r) {
  return {{"threads", r.threads},
          {"fp32_fma_gflops", r.fp32_fma_gflops},
          {"bf16_dot_gflops", r.bf16_dot_gflops},
          {"int8_dot_gops", r.int8_dot_gops},
          {"amx_bf16_gflops", r.amx_bf16_gflops},
          {"mem_bw_gbps", r.mem_bw_gbps}};
}

bench::MachineReport machine(bool quick) {
  fmt::print(stderr, "measuring the machine ({})...\n", quick ? "quick" : "full");
  return bench::measure_machine(default_thread_pool(), quick);
}

int run_machine(bool json, bool quick) {
  const bench::MachineReport m = machine(quick);
  if (json) {
    ordered_json j = rates_json(m.all);
    j["single_thread"] = rates_json(m.single);
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  fmt::print("{:<10} {:>16} {:>16} {:>16} {:>16} {:>14}\n", "threads", "FP32 FMA GFLOP/s",
             "BF16 dot GFLOP/s", "int8 dot GOP/s", "AMX BF16 GFLOP/s", "read GB/s");
  for (const auto* r : {&m.single, &m.all})
    fmt::print("{:<10} {:>16.1f} {:>16.1f} {:>16.1f} {:>16.1f} {:>14.1f}\n", r->threads,
               r->fp32_fma_gflops, r->bf16_dot_gflops, r->int8_dot_gops, r->amx_bf16_gflops,
               r->mem_bw_gbps);
  return 0;
}

struct DecodeOptions {
  std::vector<int> b{1}, s_q{1}, h_q{16, 128}, s_kv{1024, 4096, 16384};
  std::vector<std::string> kv_dtype{"bf16"};
  std::string q_dtype = "bf16", variant;
  int reps = 5;
  bool json = false;
};

Result<DType> latent_of(const std::string& name) {
  MLA_ASSIGN_OR_RETURN(KvCacheDtype k, parse_kv_cache_dtype(name));
  return kv_cache_latent_dtype(k);
}

int run_decode(const DecodeOptions& o) {
  const bench::MachineReport m = machine(true);
  ordered_json all = ordered_json::array();
  if (!o.json)
    fmt::print("{:>3} {:>4} {:>4} {:>6} {:<9} {:<32} {:>10} {:>9} {:>8} {:>7} {:>7}\n", "b", "s_q",
               "h_q", "s_kv", "kv_dtype", "variant", "us/call", "GFLOP/s", "GB/s", "%bf16",
               "%roof");
  for (const std::string& kv : o.kv_dtype)
    for (int b : o.b)
      for (int s_q : o.s_q)
        for (int h_q : o.h_q)
          for (int s_kv : o.s_kv) {
            auto lat = latent_of(kv);
            if (!lat.ok()) {
              fmt::print(stderr, "mla bench decode: --kv-dtype: {}\n", lat.status().message());
              return 2;
            }
            bench::DecodeCase c{b,    s_q,  h_q,
                                s_kv, *lat, o.q_dtype == "bf16" ? DType::kBF16 : DType::kF32};
            c.int8_products = o.q_dtype == "int8";
            fmt::print(stderr, "decode b={} s_q={} h_q={} s_kv={} kv={}...\n", b, s_q, h_q, s_kv,
                       kv);
            auto r = bench::bench_decode(c, m, default_thread_pool(), o.reps, o.variant);
            if (!r.ok()) {
              fmt::print(stderr, "mla bench decode: {}\n", r.status().message());
              return 1;
            }
            if (o.json) {
              all.push_back({{"b", b},
                             {"s_q", s_q},
                             {"h_q", h_q},
                             {"s_kv", s_kv},
                             {"kv_dtype", kv},
                             {"path", "absorbed"},
                             {"variant", r->variant},
                             {"us_per_call", r->t.median_s * 1e6},
                             {"us_min", r->t.min_s * 1e6},
                             {"us_max", r->t.max_s * 1e6},
                             {"gflops", r->gflops},
                             {"gbps", r->gbps},
                             {"pct_of_bf16_peak", r->pct_of_bf16_peak},
                             {"pct_of_roofline", r->pct_of_roofline}});
            } else {
              fmt::print(
                  "{:>3} {:>4} {:>4} {:>6} {:<9} {:<32} {:>10.1f} {:>9.1f} {:>8.2f} {:>6.1f}% "
                  "{:>6.1f}%\n",
                  b, s_q, h_q, s_kv, kv, r->variant, r->t.median_s * 1e6, r->gflops, r->gbps,
                  r->pct_of_bf16_peak, r->pct_of_roofline);
            }
          }
  if (o.json) fmt::print("{}\n", all.dump(2));
  return 0;
}

struct PrefillOptions {
  std::vector<int> m{64, 256, 1024}, l{1024, 4096}, h_q{128};
  int reps = 3;
  bool json = false;
  std::string attention_dtype = "bf16", path = "both";
};

ordered_json prefill_json(const bench::PrefillResult& r) {
  return {{"m", r.c.m},
          {"l", r.c.l},
          {"h_q", r.c.h_q},
          {"path", r.path},
          {"ms_per_call", r.t.median_s * 1e3},
          {"gflops", r.gflops},
          {"tokens_per_s", r.tokens_per_s},
          {"pct_of_bf16_peak", r.pct_of_bf16_peak},
          {"pct_of_int8_peak", r.pct_of_int8_peak}};
}

int run_prefill(const PrefillOptions& o) {
  const bench::MachineReport m = machine(true);
  ordered_json all = ordered_json::array();
  if (!o.json)
    fmt::print("{:>5} {:>6} {:>4} {:<13} {:>10} {:>9} {:>10} {:>7} {:>7}\n", "M", "L", "h_q",
               "path", "ms/call", "GFLOP/s", "tokens/s", "%bf16", "%int8");
  for (int h : o.h_q)
    for (int l : o.l)
      for (int mm : o.m) {
        fmt::print(stderr, "prefill M={} L={} h_q={}...\n", mm, l, h);
        bench::PrefillCase c{mm, l, h, DType::kBF16, absorbed_q_dtype_of(o.attention_dtype)};
        c.decompressed_dtype = prefill_attention_dtype_of(o.attention_dtype);
        c.absorbed = o.path != "decompressed";
        c.decompressed = o.path != "absorbed";
        auto rs = bench::bench_prefill(c, m, default_thread_pool(), o.reps);
        if (!rs.ok()) {
          fmt::print(stderr, "mla bench prefill: {}\n", rs.status().message());
          return 1;
        }
        for (const auto& r : *rs) {
          if (o.json)
            all.push_back(prefill_json(r));
          else
            fmt::print("{:>5} {:>6} {:>4} {:<13} {:>10.2f} {:>9.1f} {:>10.0f} {:>6.1f}% {}\n", mm,
                       l, h, r.path, r.t.median_s * 1e3, r.gflops, r.tokens_per_s,
                       r.pct_of_bf16_peak,
                       r.pct_of_int8_peak > 0 ? fmt::format("{:>6.1f}%", r.pct_of_int8_peak)
                                              : fmt::format("{:>7}", "-"));
        }
      }
  if (o.json) fmt::print("{}\n", all.dump(2));
  return 0;
}

struct ThresholdOptions {
  std::vector<int> m{16, 32, 64, 128, 192, 256, 384, 512, 768, 1024}, l{1024, 4096, 16384};
  int h_q = 128, reps = 1;
  bool json = false, write = false;
  std::string attention_dtype = "bf16";
};

// One swept point: chunk length and the two paths' times.
struct SweepPoint {
  int m;
  double absorbed_s, decompressed_s;
};

// The largest chunk length that should still take the absorbed path: between the last swept M
// where absorbed wins and the first M from which decompressed keeps winning, the time difference
// is interpolated linearly to its zero. All absorbed: the last M; all decompressed: 0.
int absorbed_up_to(const std::vector<SweepPoint>& pts) {
  size_t first = pts.size();  // first index of the final run of decompressed wins
  while (first > 0 && pts[first - 1].decompressed_s < pts[first - 1].absorbed_s) --first;
  if (first == pts.size()) return pts.empty() ? 0 : pts.back().m;
  if (first == 0) return 0;
  const SweepPoint &lo = pts[first - 1], &hi = pts[first];
  const double d_lo = lo.absorbed_s - lo.decompressed_s, d_hi = hi.absorbed_s - hi.decompressed_s;
  return int(lo.m + (hi.m - lo.m) * (-d_lo) / (d_hi - d_lo));  // d_lo <= 0 < d_hi
}

int run_threshold(const ThresholdOptions& o) {
  const bench::MachineReport m = machine(true);
  ordered_json per_l = ordered_json::array();
  int worst = 0;  // the threshold for the engine: the smallest over the contexts
  bool first = true;
  for (int l : o.l) {
    std::vector<SweepPoint> pts;
    ordered_json rows = ordered_json::array();
    for (int mm : o.m) {
      fmt::print(stderr, "threshold M={} L={}...\n", mm, l);
      auto rs = bench::bench_prefill({mm, l, o.h_q, DType::kBF16, f32_or_bf16(o.attention_dtype)},
                                     m, default_thread_pool(), o.reps);
      if (!rs.ok()) {
        fmt::print(stderr, "mla bench threshold: {}\n", rs.status().message());
        return 1;
      }
      const double ta = (*rs)[0].t.median_s, td = (*rs)[1].t.median_s;
      pts.push_back({mm, ta, td});
      rows.push_back({{"m", mm}, {"absorbed_ms", ta * 1e3}, {"decompressed_ms", td * 1e3}});
      if (!o.json)
        fmt::print("L {:>6}  M {:>5}  absorbed {:>10.2f} ms  decompressed {:>10.2f} ms  {}\n", l,
                   mm, ta * 1e3, td * 1e3, td < ta ? "decompressed" : "absorbed");
    }
    // The engine's rule (choose_mla_path, PrefillPathRule::kCost) puts the crossover over l
    // cached tokens below T: the T that puts it where it was measured. Over no context the rule
    // absorbs nothing whatever T, so such a sweep does not enter the figure.
    const int crossover = absorbed_up_to(pts);
    const int threshold = cost_rule_threshold(crossover, l);
    if (l > 0) {
      worst = first ? threshold : std::min(worst, threshold);
      first = false;
    }
    per_l.push_back(
        {{"l", l}, {"crossover", crossover}, {"threshold", threshold}, {"sweep", rows}});
    if (!o.json)
      fmt::print("L {:>6}: absorbed up to M = {} (threshold {} under the engine's rule)\n", l,
                 crossover, threshold);
  }
  if (first) {
    fmt::print(stderr,
               "mla bench threshold: no context L > 0 swept: the threshold applies only "
               "over cached tokens\n");
    return 1;
  }
  if (o.json)
    fmt::print("{}\n",
               ordered_json{{"h_q", o.h_q}, {"contexts", per_l}, {"threshold", worst}}.dump(2));
  else
    fmt::print("prefill_absorption_threshold = {} (smallest over the contexts)\n", worst);
  if (o.write) {
    // One attention dtype per run: the other's figure is kept from the file when there is one.
    const std::string path = tune_file_path();
    TuneData d;
    d.prefill_absorption_threshold = kDefaultPrefillAbsorptionThreshold;
    if (auto old = read_tune_file(path); old.ok()) d = *old;
    (o.attention_dtype == "bf16" ? d.prefill_absorption_threshold_bf16
                                 : d.prefill_absorption_threshold) = worst;
    d.measured_on =
        fmt::format("{} threads, h_q {}, {} attention", m.all.threads, o.h_q, o.attention_dtype);
    if (Status s = write_tune_file(path, d); !s.ok()) {
      fmt::print(stderr, "mla tune: {}\n", s.message());
      return 1;
    }
    fmt::print(stderr, "wrote {}\n", path);
  }
  return 0;
}

void add_threshold_flags(CLI::App* cmd, ThresholdOptions* o) {
  cmd->add_option("--m", o->m, "Chunk lengths to sweep (comma list)")->delimiter(',');
  cmd->add_option("--l", o->l, "Cached tokens before the chunk (comma list; at least one > 0)")
      ->delimiter(',');
  cmd->add_option("--h-q", o->h_q, "Heads")->capture_default_str()->check(CLI::Range(1, 1024));
  cmd->add_option("--reps", o->reps, "Timed calls per point (median)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  cmd->add_flag("--json", o->json, "Print JSON");
  add_attention_dtype_flag(cmd, &o->attention_dtype, /*int8=*/false);
}

}  // namespace

// `mla bench offline` lives in cmd_bench_offline.cc (it needs the serving engine), `mla bench
// serve` in cmd_bench_serve.cc (an HTTP client), `mla bench model` in cmd_bench_model.cc.
void register_bench_offline(CLI::App* bench, int* exit_code);
void register_bench_serve(CLI::App* bench, int* exit_code);
void register_bench_model(CLI::App* bench, int* exit_code);
void register_bench_ranks(CLI::App* bench, int* exit_code);

void register_bench(CLI::App& app, int* exit_code) {
  CLI::App* bench =
      app.add_subcommand("bench", "Measure the machine and the MLA kernels against it");
  bench->require_subcommand(1);

  auto machine_json = std::make_shared<bool>(false), machine_quick = std::make_shared<bool>(false);
  CLI::App* mach = bench->add_subcommand(
      "machine", "FP32 FMA and BF16 dot peaks, memory bandwidth; 1 and all threads");
  mach->add_flag("--json", *machine_json, "Print JSON");
  mach->add_flag("--quick", *machine_quick, "Shorter probes (less stable figures)");
  mach->callback([machine_json, machine_quick, exit_code] {
    *exit_code = run_machine(*machine_json, *machine_quick);
  });

  auto d = std::make_shared<DecodeOptions>();
  CLI::App* dec =
      bench->add_subcommand("decode", "Absorbed decode over a grid of b, s_q, h_q, s_kv, kv dtype");
  dec->add_option("--b", d->b, "Batch sizes (comma list)")->delimiter(',');
  dec->add_option("--s-q", d->s_q, "Query tokens per sequence (comma list)")->delimiter(',');
  dec->add_option("--h-q", d->h_q, "Heads (comma list)")->delimiter(',');
  dec->add_option("--s-kv", d->s_kv, "Cached tokens (comma list)")->delimiter(',');
  dec->add_option("--kv-dtype", d->kv_dtype,
                  "Cache formats: bf16, fp8_e4m3, int8, nvfp4 (comma list)")
      ->delimiter(',');
  dec->add_option("--q-dtype", d->q_dtype,
                  "Query dtype: bf16 (FlashMLA's), f32 (the engine's absorbed query) or int8 (an "
                  "f32 query with int8 products asked for: the int8 variant over an int8 cache, or "
                  "a bf16 one from 64 rows)")
      ->capture_default_str()
      ->check(CLI::IsMember({"bf16", "f32", "int8"}));
  dec->add_option("--variant", d->variant,
                  "A registered variant (default: the best that supports the case)");
  dec->add_option("--reps", d->reps, "Timed calls (median; at least 0.2 s in all)")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  dec->add_flag("--json", d->json, "Print JSON");
  dec->callback([d, exit_code] { *exit_code = run_decode(*d); });

  auto p = std::make_shared<PrefillOptions>();
  CLI::App* pre = bench->add_subcommand(
      "prefill", "Both paths (or --path) of mla_attention for chunk length M over context L");
  pre->add_option("--m", p->m, "Chunk lengths (comma list)")->delimiter(',');
  pre->add_option("--l", p->l, "Context lengths (comma list)")->delimiter(',');
  pre->add_option("--h-q", p->h_q, "Heads (comma list)")->delimiter(',');
  pre->add_option("--reps", p->reps, "Timed calls (median)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  pre->add_flag("--json", p->json, "Print JSON");
  add_attention_dtype_flag(pre, &p->attention_dtype);
  pre->add_option("--path", p->path, "Paths timed: absorbed, decompressed or both")
      ->capture_default_str()
      ->check(CLI::IsMember({"absorbed", "decompressed", "both"}));
  pre->callback([p, exit_code] { *exit_code = run_prefill(*p); });

  auto t = std::make_shared<ThresholdOptions>();
  CLI::App* thr = bench->add_subcommand(
      "threshold", "Sweep M to find where the decompressed path overtakes the absorbed one");
  add_threshold_flags(thr, t.get());
  thr->callback([t, exit_code] { *exit_code = run_threshold(*t); });

  register_bench_offline(bench, exit_code);
  register_bench_serve(bench, exit_code);
  register_bench_model(bench, exit_code);
  register_bench_ranks(bench, exit_code);
}

void register_tune(CLI::App& app, int* exit_code) {
  auto t = std::make_shared<ThresholdOptions>();
  t->write = true;
  CLI::App* tune = app.add_subcommand(
      "tune",
      "Measure the absorb/decompress crossover and store the threshold that puts the engine's "
      "rule there in the tuning file (MLA_TUNE_FILE, else ~/.cache/mla/tune.json)");
  add_threshold_flags(tune, t.get());
  tune->callback([t, exit_code] { *exit_code = run_threshold(*t); });
}

MLA_REGISTER_COMMAND("bench", register_bench);
MLA_REGISTER_COMMAND("tune", register_tune);

}  // namespace mla::cli
