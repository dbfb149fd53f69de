// Benchmarks of every registered CPU mla_decode variant on the shapes that matter for DeepSeek
// decode (128 heads, 576/512 dims), reported as GFLOP/s of the useful work
// 2·h_q·s_q·s_kv·(576+512). Speed targets and the roofline comparison belong to `mla bench` (issue
// #4); this suite gives kernel developers a quick before/after.
#include <benchmark/benchmark.h>

#include <cmath>

#include "core/thread_pool.h"
#include "kernels/mla_problem.h"
#include "kernels/registry.h"

namespace {

void BM_MlaDecode(benchmark::State& state, const mla::MlaDecodeVariant* v, int b, int h_q,
                  int s_kv) {
  mla::Rng rng(1);
  const int s_q = 1, d_qk = 576, d_v = 512;
  const auto cache = mla::make_paged_cache(rng, mla::DType::kBF16, std::vector<int32_t>(b, s_kv),
                                           64, d_v, d_qk - d_v, 1.0);
  std::vector<uint16_t> q(size_t(b) * s_q * h_q * d_qk);
  for (auto& x : q) x = mla::f32_to_bf16(float(rng.normal()));
  std::vector<float> out(size_t(b) * s_q * h_q * d_v), lse(size_t(b) * h_q * s_q);
  mla::MlaDecodeParams p;
  mla::set_decode_cache(cache, p);
  p.s_q = s_q;
  p.h_q = h_q;
  p.q_dtype = mla::DType::kBF16;
  p.q = q.data();
  p.softmax_scale = float(1.0 / std::sqrt(192.0));
  p.out = out.data();
  p.lse = lse.data();
  if (!v->supports(p)) {
    state.SkipWithError("unsupported on this CPU");
    return;
  }
  for (auto _ : state) v->run(p, mla::default_thread_pool());
  const double flops = 2.0 * b * s_q * h_q * double(s_kv) * (d_qk + d_v);
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GB/s"] = benchmark::Counter(double(b) * s_kv * d_qk * 2 * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
}

const bool registered = [] {
  for (const auto& v : mla::mla_decode_variants()) {
    if (v.backend == "ref") continue;
    for (int h : {16, 128})
      benchmark::RegisterBenchmark(
          ("mla_decode/" + v.name + "/b1_h" + std::to_string(h) + "_skv4096").c_str(), BM_MlaDecode,
          &v, 1, h, 4096)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
  }
  return true;
}();

}  // namespace

BENCHMARK_MAIN();
