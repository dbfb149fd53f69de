// mla_prefill cases: the decompressed path for a chunk of queries over prior context, every
// non-reference variant against the FP64 reference.
#include <fmt/format.h>

#include <cmath>

#include "../harness.h"
#include "kernels/mla_problem.h"

namespace mla::ops {
namespace {

struct PrefillSpec {
  int s_q, prior, h_q, page_size;
  bool causal;
  int d_n = 128, d_r = 64, d_v = 128, r = 512;
  DType kv_dtype = DType::kBF16;

  int s_kv() const { return prior + s_q; }
  std::string name() const {
    return fmt::format("sq{}_prior{}_h{}_p{}_dn{}_dr{}_dv{}_r{}{}_kv{}", s_q, prior, h_q, page_size,
                       d_n, d_r, d_v, r, causal ? "_causal" : "", dtype_name(kv_dtype));
  }
};

// Weights rounded to BF16 (as checkpoints store them), N(0, 1/r) so that k_nope and v have unit
// variance over unit-variance latents.
std::vector<float> bf16_weights(Rng& rng, int64_t n, double sd) {
  std::vector<float> w(n);
  for (auto& x : w) x = round_to_bf16(float(rng.normal() * sd));
  return w;
}

void run_prefill_case(const PrefillSpec& spec, const Options& opt, Tally& tally) {
  const std::string op = "mla_prefill", cname = spec.name();
  bool wanted = false;
  for (const auto& v : mla_prefill_variants())
    wanted |= v.backend != "ref" && matches(opt, op, cname, v.name);
  if (!wanted) return;
  Rng rng(uint64_t(spec.s_q) * 131 + spec.prior * 7 + spec.h_q);
  const int d_qk = spec.d_n + spec.d_r;
  const PagedCache cache =
      make_paged_cache(rng, spec.kv_dtype, {spec.s_kv()}, spec.page_size, spec.r, spec.d_r, 1.0);
  std::vector<float> q(size_t(spec.s_q) * spec.h_q * d_qk);
  fill_normal(rng, DType::kF32, q.data(), int64_t(q.size()), 1.0);
  const auto w_uk =
      bf16_weights(rng, int64_t(spec.h_q) * spec.d_n * spec.r, 1.0 / std::sqrt(double(spec.r)));
  const auto w_uv =
      bf16_weights(rng, int64_t(spec.h_q) * spec.d_v * spec.r, 1.0 / std::sqrt(double(spec.r)));

  MlaPrefillParams p;
  p.s_q = spec.s_q;
  p.h_q = spec.h_q;
  p.d_n = spec.d_n;
  p.d_r = spec.d_r;
  p.d_v = spec.d_v;
  p.r = spec.r;
  p.cache = cache_view(cache);
  p.q = q.data();
  p.w_uk = w_uk.data();
  p.w_uv = w_uv.data();
  p.softmax_scale = float(1.0 / std::sqrt(double(d_qk)));
  p.causal = spec.causal;

  const int64_t n_out = int64_t(spec.s_q) * spec.h_q * spec.d_v,
                n_lse = int64_t(spec.h_q) * spec.s_q;
  std::vector<float> out_ref(n_out), lse_ref(n_lse);
  MlaPrefillParams pr = p;
  pr.out = out_ref.data();
  pr.lse = lse_ref.data();
  const auto* ref = select_variant(pr, "ref").value();
  const Status ref_status = run_variant(*ref, pr, default_thread_pool());
  if (!ref_status.ok()) {
    report(tally, op, cname, ref->name, false, ref_status.to_string());
    return;
  }
  for (const auto& v : mla_prefill_variants()) {
    if (v.backend == "ref" || !matches(opt, op, cname, v.name)) continue;
    if (!v.supports(p)) {
      report_unsupported(tally, op, cname, v.name);
      continue;
    }
    GuardedOutput out(n_out), lse(n_lse);
    out.poison();
    lse.poison();
    MlaPrefillParams pv = p;
    pv.out = out.data();
    pv.lse = lse.data();
    const Status st = run_variant(v, pv, default_thread_pool());
    if (!st.ok()) {
      report(tally, op, cname, v.name, false, st.to_string());
      continue;
    }
    CompareRule out_rule = flashmla_out_rule();
    out_rule.cos_min = cos_bound(v.compute);
    const CompareStats so = compare(out_ref.data(), out.data(), n_out, out_rule);
    const CompareStats sl = compare(lse_ref.data(), lse.data(), n_lse, flashmla_lse_rule());
    const bool guards = out.guards_intact() && lse.guards_intact();
    std::string detail = fmt::format("out[{}] lse[{}]{}{}", so.to_string(), sl.to_string(),
                                     guards ? "" : " GUARD BYTES OVERWRITTEN",
                                     so.got_all_zero ? " ALL-ZERO OUTPUT" : "");
    if (opt.perf) {
      const double sec = median_seconds(opt.perf_reps, [&] { v.run(pv, default_thread_pool()); });
      fmt::print("PERF {}/{} {} {:.3f} ms\n", op, cname, v.name, sec * 1e3);
    }
    report(tally, op, cname, v.name, so.pass && sl.pass && guards && !so.got_all_zero, detail);
  }
}

}  // namespace

void add_mla_prefill_cases(std::vector<OpCase>& cases, const Options& opt) {
  std::vector<PrefillSpec> specs;
  for (int s_q : {1, 7, 64, 130})
    for (int prior : {0, 45, 300})
      for (int h : {1, 3, 16}) {
        PrefillSpec s{s_q, prior, h, (s_q + prior) % 2 ? 16 : 64, (s_q + h) % 3 != 0};
        const int64_t work = int64_t(s_q) * s.s_kv() * h;
        if (work <= (opt.quick ? 4000 : 200000)) specs.push_back(s);
      }
  auto add = [&](PrefillSpec s, int d_n, int d_r, int d_v, int r, DType kv) {
    s.d_n = d_n;
    s.d_r = d_r;
    s.d_v = d_v;
    s.r = r;
    s.kv_dtype = kv;
    specs.push_back(s);
  };
  add({9, 70, 5, 16, true}, 16, 8, 24, 40, DType::kF32);      // nothing a multiple of 16
  add({33, 0, 40, 64, true}, 64, 32, 64, 256, DType::kBF16);  // MiniCPM3 dims, no prior context
  add({5, 3, 2, 16, true}, 17, 6, 9, 33, DType::kBF16);
  if (!opt.quick) add({300, 600, 16, 64, true}, 128, 64, 128, 512, DType::kBF16);  // > one chunk
  for (DType kt : {DType::kF8E4M3, DType::kI8, DType::kE2M1}) {
    add({7, 45, 3, 16, true}, 128, 64, 128, 512, kt);
    add({9, 70, 5, 16, true}, 16, 8, 24, 40, kt);
  }
  for (const auto& s : specs)
    cases.push_back(
        {"mla_prefill", s.name(), [s](const Options& o, Tally& t) { run_prefill_case(s, o, t); }});
}

}  // namespace mla::ops
