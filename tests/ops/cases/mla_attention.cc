// mla_attention cases: the layer-level op on both paths and both backends against the FP64
// decompressed reference, and the V3-shape equivalence check of `mla verify` (absorbed vs
// decompressed vs reference for every variant).
#include <fmt/format.h>

#include <cmath>

#include "../harness.h"
#include "kernels/mla_attention.h"
#include "kernels/mla_problem.h"
#include "kernels/mla_verify.h"

namespace mla::ops {
namespace {

void run_equivalence(const VerifyConfig& cfg, const std::string& cname, const Options& opt,
                     Tally& tally) {
  if (!matches(opt, "mla_attention", cname, "")) return;
  auto rep = run_mla_verify(cfg, default_thread_pool());
  if (!rep.ok()) {
    report(tally, "mla_attention", cname, "verify", false, rep.status().to_string());
    return;
  }
  for (const auto& p : rep->pairs)
    if (p.gating)
      report(tally, "mla_attention", cname, p.a + "~" + p.b + ":" + p.tensor, p.pass,
             fmt::format("{} cos_bound {:.7f}", p.stats.to_string(), p.cos_bound));
}

struct PathSpec {
  int s_q, prior, h_q;
  std::string name() const { return fmt::format("paths_sq{}_prior{}_h{}", s_q, prior, h_q); }
};

void run_paths(const PathSpec& spec, const Options& opt, Tally& tally) {
  const std::string op = "mla_attention", cname = spec.name();
  if (!matches(opt, op, cname, "")) return;
  const int d_n = 32, d_r = 16, d_v = 24, r = 64, s_kv = spec.prior + spec.s_q, H = spec.h_q;
  Rng rng(uint64_t(spec.s_q) * 31 + spec.prior);
  const PagedCache cache = make_paged_cache(rng, DType::kBF16, {s_kv}, 16, r, d_r, 1.0);
  std::vector<float> q(size_t(spec.s_q) * H * (d_n + d_r));
  fill_normal(rng, DType::kF32, q.data(), int64_t(q.size()), 1.0);
  std::vector<uint16_t> kv_b(size_t(H) * (d_n + d_v) * r);
  fill_normal(rng, DType::kBF16, kv_b.data(), int64_t(kv_b.size()), 1.0 / std::sqrt(double(r)));
  auto w = prepare_absorbed_weights(
      LinearWeight{DType::kBF16, reinterpret_cast<const uint8_t*>(kv_b.data()),
                   int64_t(H) * (d_n + d_v), r},
      H, d_n, d_v);
  if (!w.ok()) {
    report(tally, op, cname, "prepare", false, w.status().to_string());
    return;
  }
  MlaAttentionParams p;
  p.s_q = spec.s_q;
  p.d_r = d_r;
  p.q = q.data();
  p.cache = cache_view(cache);
  p.w = &*w;
  p.softmax_scale = float(1.0 / std::sqrt(double(d_n + d_r)));
  const int64_t n_out = int64_t(spec.s_q) * H * d_v;
  auto run = [&](const char* backend, int threshold, std::vector<float>& out,
                 std::vector<float>& lse) {
    out.assign(n_out, std::nanf(""));
    lse.assign(size_t(H) * spec.s_q, std::nanf(""));
    MlaAttentionParams pp = p;
    pp.prefill_absorption_threshold = threshold;
    pp.prefill_path_rule = PrefillPathRule::kLength;  // each path forced by its threshold
    pp.out = out.data();
    pp.lse = lse.data();
    return mla_attention(pp, default_thread_pool(), backend);
  };
  std::vector<float> ref_out, ref_lse;
  auto ref_path = run("ref", 0, ref_out, ref_lse);
  if (!ref_path.ok() || *ref_path != MlaPath::kDecompressed) {
    report(tally, op, cname, "ref.decompressed", false,
           ref_path.ok() ? "wrong path" : ref_path.status().to_string());
    return;
  }
  struct Run {
    const char* backend;
    int threshold;
  };
  for (Run rn :
       {Run{"ref", spec.s_q}, Run{"cpu", spec.s_q}, Run{"cpu", spec.s_q - 1}, Run{"cpu", 256}}) {
    std::vector<float> out, lse;
    auto path = run(rn.backend, rn.threshold, out, lse);
    const std::string variant = fmt::format("{}.threshold{}", rn.backend, rn.threshold);
    if (!path.ok()) {
      report(tally, op, cname, variant, false, path.status().to_string());
      continue;
    }
    const bool right_path =
        *path == choose_mla_path(spec.s_q, rn.threshold, spec.prior, PrefillPathRule::kLength);
    // Both cpu paths keep FP32 intermediates (the absorbed query is FP32, which the BF16-dot
    // decode does not take).
    CompareRule rule = flashmla_out_rule();
    rule.cos_min = cos_bound(Intermediates::kFp32);
    const CompareStats so = compare(ref_out.data(), out.data(), n_out, rule);
    const CompareStats sl =
        compare(ref_lse.data(), lse.data(), int64_t(lse.size()), flashmla_lse_rule());
    report(tally, op, cname, variant, right_path && so.pass && sl.pass && !so.got_all_zero,
           fmt::format("path {} out[{}] lse[{}]", mla_path_name(*path), so.to_string(),
                       sl.to_string()));
  }
}

}  // namespace

void add_mla_attention_cases(std::vector<OpCase>& cases, const Options& opt) {
  for (PathSpec s :
       {PathSpec{1, 40, 3}, PathSpec{5, 100, 16}, PathSpec{40, 0, 4}, PathSpec{70, 130, 2}})
    cases.push_back(
        {"mla_attention", s.name(), [s](const Options& o, Tally& t) { run_paths(s, o, t); }});
  VerifyConfig v3;  // DeepSeek-V3 attention dims, 2,048 cached tokens
  if (opt.quick) {
    v3.heads = 16;
    v3.seq = 300;
  }
  const std::string name = fmt::format("equivalence_h{}_seq{}", v3.heads, v3.seq);
  cases.push_back({"mla_attention", name,
                   [v3, name](const Options& o, Tally& t) { run_equivalence(v3, name, o, t); }});
  VerifyConfig mtp = v3;  // two queries (speculative / MTP decode), causal
  mtp.queries = 2;
  mtp.seq = opt.quick ? 70 : 700;
  mtp.dtype = DType::kF32;
  const std::string name2 = fmt::format("equivalence_h{}_seq{}_sq2_f32", mtp.heads, mtp.seq);
  cases.push_back({"mla_attention", name2, [mtp, name2](const Options& o, Tally& t) {
                     run_equivalence(mtp, name2, o, t);
                   }});
}

}  // namespace mla::ops
