// `mla bench ranks`: the collectives a model split over ranks pays per layer (docs/ARCHITECTURE.md
// §Ranks), measured under mpirun: the all-reduce of the hidden state ([tokens, D] FP32, twice per
// layer) at DeepSeek's hidden sizes, and the broadcast of one decode step's batch.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "bench/serve_stats.h"
#include "commands.h"
#include "dist/communicator.h"

namespace mla::cli {
namespace {

struct BenchRanksOptions {
  std::vector<int> hidden = {2048, 7168};  // V2-Lite, V3
  std::vector<int> tokens = {1, 2, 4, 8, 16, 32, 64};
  int iters = 200;
  bool json = false;
};

using Clock = std::chrono::steady_clock;

// Median seconds of fn() over `iters` calls after a tenth as many untimed ones; every rank runs
// the same calls, the leader's clock is the one reported.
template <class Fn>
double median_seconds(int iters, Fn&& fn) {
  for (int i = 0; i < std::max(2, iters / 10); ++i) fn();
  std::vector<double> t(static_cast<size_t>(iters));
  for (double& s : t) {
    const auto t0 = Clock::now();
    fn();
    s = std::chrono::duration<double>(Clock::now() - t0).count();
  }
  return bench::percentile(t, 50);
}

int run_bench_ranks(const BenchRanksOptions& o) {
  dist::Communicator* w = dist::world();
  if (!w) {
    fmt::print(stderr,
               "error: mla bench ranks measures the collectives between ranks: start it with "
               "mpirun -np N (N >= 2){}\n",
               dist::built_with_mpi() ? "" : " in a build with MPI (libopenmpi-dev)");
    return 1;
  }
  nlohmann::json rows = nlohmann::json::array();
  if (w->leader() && !o.json)
    fmt::print("{} ranks; all-reduce of [tokens, hidden] FP32, median of {} calls\n", w->size(),
               o.iters);
  if (w->leader() && !o.json)
    fmt::print("{:>7} {:>7} {:>10} {:>12} {:>12}\n", "hidden", "tokens", "bytes", "latency us",
               "GB/s");
  for (int d : o.hidden)
    for (int t : o.tokens) {
      std::vector<float> x(size_t(d) * size_t(t), 1.0f);
      const double s = median_seconds(o.iters, [&] { w->all_reduce_sum(x.data(), x.size()); });
      const double bytes = 4.0 * double(x.size());
      rows.push_back({{"hidden", d},
                      {"tokens", t},
                      {"bytes", bytes},
                      {"latency_us", s * 1e6},
                      {"gbps", bytes / s / 1e9}});
      if (w->leader() && !o.json)
        fmt::print("{:>7} {:>7} {:>10.0f} {:>12.1f} {:>12.2f}\n", d, t, bytes, s * 1e6,
                   bytes / s / 1e9);
    }
  // One decode step's batch as the leader sends it (model/model_dist.cc): a 10-value header,
  // then ids, positions and block tables of 8 sequences of 4,096 tokens in 64-token pages.
  std::vector<int64_t> header(10), body(8 * (1 + 3 + 64));
  const double step = median_seconds(o.iters, [&] {
    w->broadcast_waiting(header.data(), header.size() * 8);
    w->broadcast(body.data(), body.size() * 8);
  });
  if (!w->leader()) return 0;
  if (o.json) {
    nlohmann::json j;
    j["ranks"] = w->size();
    j["all_reduce"] = rows;
    j["step_broadcast_us"] = step * 1e6;
    fmt::print("{}\n", j.dump(2));
  } else {
    fmt::print("decode step broadcast (8 sequences, {} bytes): {:.1f} us\n",
               (header.size() + body.size()) * 8, step * 1e6);
  }
  return 0;
}

}  // namespace

void register_bench_ranks(CLI::App* bench, int* exit_code) {
  auto o = std::make_shared<BenchRanksOptions>();
  CLI::App* cmd = bench->add_subcommand(
      "ranks", "All-reduce latency and bandwidth between ranks (run under mpirun -np N)");
  cmd->add_option("--hidden", o->hidden, "Hidden sizes (default 2048 7168: V2-Lite, V3)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--tokens", o->tokens, "Tokens per all-reduce (default 1 2 4 ... 64)")
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--iters", o->iters, "Timed calls per size (default 200)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_flag("--json", o->json, "Print the figures as JSON");
  cmd->callback([o, exit_code] { *exit_code = run_bench_ranks(*o); });
}

}  // namespace mla::cli
