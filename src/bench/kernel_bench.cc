// bench_decode / bench_prefill: inputs from kernels/mla_problem, calls through the registry and
// mla_attention exactly as the engine makes them.
#include "bench/kernel_bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "core/kv_format.h"
#include "core/rng.h"
#include "kernels/mla_attention.h"
#include "kernels/mla_problem.h"
#include "kernels/registry.h"

namespace mla::bench {

Timing time_calls(const std::function<void()>& fn, int reps, double min_seconds) {
  using Clock = std::chrono::steady_clock;
  fn();  // warm-up: page faults, scratch growth, thread wake-up
  std::vector<double> s;
  double total = 0;
  while (int(s.size()) < std::max(reps, 1) || total < min_seconds) {
    const auto t0 = Clock::now();
    fn();
    s.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    total += s.back();
  }
  std::sort(s.begin(), s.end());
  return {s[s.size() / 2], s.front(), s.back(), int(s.size())};
}

Result<DecodeResult> bench_decode(const DecodeCase& c, const MachineReport& m, ThreadPool& pool,
                                  int reps, const std::string& variant) {
  constexpr int kDqk = 576, kDv = 512, kPage = 64;
  if (c.b < 1 || c.s_q < 1 || c.h_q < 1 || c.s_kv < c.s_q)
    return invalid_argument(
        fmt::format("bench decode: need b, s_q, h_q >= 1 and s_kv >= s_q (got "
                    "b={} s_q={} h_q={} s_kv={})",
                    c.b, c.s_q, c.h_q, c.s_kv));
  Rng rng(7);
  const PagedCache cache = make_paged_cache(rng, c.kv_dtype, std::vector<int32_t>(c.b, c.s_kv),
                                            kPage, kDv, kDqk - kDv, 1.0);
  const int64_t nq = int64_t(c.b) * c.s_q * c.h_q;
  std::vector<uint8_t> q(size_t(nq) * kDqk * (c.q_dtype == DType::kF32 ? 4 : 2));
  for (int64_t i = 0; i < nq * kDqk; ++i) {
    const float v = float(rng.normal());
    if (c.q_dtype == DType::kF32)
      std::memcpy(&q[size_t(i) * 4], &v, 4);
    else {
      const uint16_t h = f32_to_bf16(v);
      std::memcpy(&q[size_t(i) * 2], &h, 2);
    }
  }
  std::vector<float> out(size_t(nq) * kDv);
  std::vector<float> lse(static_cast<size_t>(nq));
  MlaDecodeParams p;
  set_decode_cache(cache, p);
  p.s_q = c.s_q;
  p.h_q = c.h_q;
  p.q_dtype = c.q_dtype;
  p.int8_products = c.int8_products;
  p.q = q.data();
  p.softmax_scale = float(1.0 / std::sqrt(192.0));
  p.causal = true;
  p.out = out.data();
  p.lse = lse.data();
  MLA_RETURN_IF_ERROR(validate(p));
  MLA_ASSIGN_OR_RETURN(const MlaDecodeVariant* v, select_variant(p, "cpu", variant));

  DecodeResult r;
  r.c = c;
  r.variant = v->name;
  r.t = time_calls([&] { v->run(p, pool); }, reps, 0.2);
  double keys = 0;  // visible (query, key) pairs
  for (int s = 0; s < c.s_q; ++s) keys += visible_keys(c.s_kv, c.s_q, s, true);
  const double flops = double(c.b) * keys * c.h_q * 2.0 * (kDqk + kDv);
  const double bytes = double(c.b) * c.s_kv * double(cache.row_bytes) + double(q.size()) +
                       double(out.size() + lse.size()) * 4;
  r.gflops = flops / r.t.median_s * 1e-9;
  r.gbps = bytes / r.t.median_s * 1e-9;
  if (m.all.bf16_dot_gflops > 0) r.pct_of_bf16_peak = 100.0 * r.gflops / m.all.bf16_dot_gflops;
  // The variant's own compute roof: the tile unit for AMX variants, vpdpbusd for the int8 one,
  // vdpbf16ps for the other BF16 ones, FP32 FMA otherwise.
  const bool amx = v->name.find(".amx.") != std::string::npos;
  const double peak = amx && m.all.amx_bf16_gflops > 0     ? m.all.amx_bf16_gflops
                      : v->compute == Intermediates::kInt8 ? m.all.int8_dot_gops
                      : v->compute >= Intermediates::kBf16 ? m.all.bf16_dot_gflops
                                                           : m.all.fp32_fma_gflops;
  const double bound = std::min(peak, m.all.mem_bw_gbps * flops / bytes);
  if (bound > 0) r.pct_of_roofline = 100.0 * r.gflops / bound;
  return r;
}

Result<std::vector<PrefillResult>> bench_prefill(const PrefillCase& c, const MachineReport& m,
                                                 ThreadPool& pool, int reps) {
  constexpr int kDn = 128, kDr = 64, kDv = 128, kR = 512, kPage = 64;
  if (c.m < 1 || c.l < 0 || c.h_q < 1)
    return invalid_argument(fmt::format(
        "bench prefill: need m >= 1, l >= 0, h_q >= 1 (got {}, {}, {})", c.m, c.l, c.h_q));
  Rng rng(11);
  const int s_kv = c.l + c.m;
  const PagedCache cache = make_paged_cache(rng, c.kv_dtype, {s_kv}, kPage, kR, kDr, 1.0);
  std::vector<float> q(size_t(c.m) * c.h_q * (kDn + kDr));
  for (auto& x : q) x = float(rng.normal());
  std::vector<uint16_t> kv_b(size_t(c.h_q) * (kDn + kDv) * kR);
  for (auto& x : kv_b) x = f32_to_bf16(float(rng.normal() / std::sqrt(double(kR))));
  MLA_ASSIGN_OR_RETURN(MlaAbsorbedWeights w,
                       prepare_absorbed_weights(
                           LinearWeight{DType::kBF16, reinterpret_cast<const uint8_t*>(kv_b.data()),
                                        int64_t(c.h_q) * (kDn + kDv), kR},
                           c.h_q, kDn, kDv));
  std::vector<float> out(size_t(c.m) * c.h_q * kDv), lse(size_t(c.h_q) * c.m);
  MlaAttentionParams p;
  p.s_q = c.m;
  p.d_r = kDr;
  p.q = q.data();
  p.cache = cache_view(cache);
  p.w = &w;
  p.softmax_scale = float(1.0 / std::sqrt(192.0));
  p.causal = true;
  p.absorbed_q_dtype = c.attention_q_dtype;
  p.decompressed_dtype = c.decompressed_dtype;
  p.out = out.data();
  p.lse = lse.data();

  // FLOPs of docs/kernels/mla_decode.md §Cost of the two paths, with L = the keys each query sees
  // on average (causal chunk).
  const double L = c.l + (c.m + 1) / 2.0, M = c.m, H = c.h_q;
  const double absorbed = M * 2 * H * (kDn * kR + kR * kDv) + M * L * 2 * H * (2 * kR + kDr);
  const double decompressed =
      double(s_kv) * 2 * H * kR * (kDn + kDv) + M * L * 2 * H * (kDn + kDr + kDv);
  std::vector<PrefillResult> results;
  for (MlaPath path : {MlaPath::kAbsorbed, MlaPath::kDecompressed}) {
    if (!(path == MlaPath::kAbsorbed ? c.absorbed : c.decompressed)) continue;
    p.prefill_absorption_threshold = path == MlaPath::kAbsorbed ? c.m : c.m - 1;
    p.prefill_path_rule = PrefillPathRule::kLength;  // the path asked for, whatever the context
    Status st;
    PrefillResult r;
    r.c = c;
    r.path = mla_path_name(path);
    r.t = time_calls(
        [&] {
          auto res = mla_attention(p, pool, "cpu");
          if (!res.ok()) st = res.status();
        },
        reps);
    MLA_RETURN_IF_ERROR(st);
    r.flops = path == MlaPath::kAbsorbed ? absorbed : decompressed;
    r.gflops = r.flops / r.t.median_s * 1e-9;
    r.tokens_per_s = M / r.t.median_s;
    if (m.all.bf16_dot_gflops > 0) r.pct_of_bf16_peak = 100.0 * r.gflops / m.all.bf16_dot_gflops;
    if (path == MlaPath::kDecompressed && p.decompressed_dtype == DType::kI8 &&
        m.all.int8_dot_gops > 0)
      r.pct_of_int8_peak = 100.0 * r.gflops / m.all.int8_dot_gops;
    results.push_back(r);
  }
  return results;
}

}  // namespace mla::bench
