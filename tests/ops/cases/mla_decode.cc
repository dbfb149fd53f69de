// mla_decode cases: FlashMLA's test grid (docs/kernels/mla_decode.md §Pass rules) thinned to a work
// budget, plus awkward shapes. Every non-reference variant is checked against the FP64 reference.
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "../harness.h"
#include "kernels/mla_problem.h"

namespace mla::ops {
namespace {

struct DecodeSpec {
  int b, s_q, s_kv, h_q, page_size;
  bool varlen, causal;
  int d_qk = 576, d_v = 512;
  DType q_dtype = DType::kBF16, kv_dtype = DType::kBF16;
  uint64_t seed = 1;
  // NaN placed where results must show it: 1 = in one query row (the last head of the first
  // query), 2 = in key 0 of sequence 0 (every row of that sequence that sees it). BF16 q and cache.
  int nan_at = 0;

  std::string name() const {
    return fmt::format("b{}_sq{}_skv{}_h{}_p{}_dqk{}_dv{}{}{}_q{}_kv{}{}", b, s_q, s_kv, h_q,
                       page_size, d_qk, d_v, varlen ? "_varlen" : "", causal ? "_causal" : "",
                       dtype_name(q_dtype), dtype_name(kv_dtype),
                       nan_at == 1   ? "_nanq"
                       : nan_at == 2 ? "_nankey"
                                     : "");
  }
  int64_t work() const { return int64_t(b) * s_q * s_kv * h_q; }
};

// FLOPs actually needed: 2·(d_qk + d_v) per visible (row, key).
double decode_flops(const MlaDecodeParams& p) {
  double keys = 0;
  for (int b = 0; b < p.b; ++b)
    for (int s = 0; s < p.s_q; ++s)
      keys += std::max(
          0, std::min(p.cache.seq_lens[b], visible_keys(p.cache.seq_lens[b], p.s_q, s, p.causal)));
  return keys * p.h_q * 2.0 * (p.d_qk + p.d_v);
}

void run_decode_case(const DecodeSpec& spec, const Options& opt, Tally& tally) {
  const std::string op = "mla_decode", cname = spec.name();
  bool wanted = false;
  for (const auto& v : mla_decode_variants())
    wanted |= v.backend != "ref" && matches(opt, op, cname, v.name);
  if (!wanted) return;
  Rng rng(spec.seed * 7919 + uint64_t(spec.work()));
  const auto seqlens = make_seqlens(rng, spec.b, spec.s_kv, spec.varlen);
  PagedCache cache = make_paged_cache(rng, spec.kv_dtype, seqlens, spec.page_size, spec.d_v,
                                      spec.d_qk - spec.d_v, 1.0);
  const int64_t nq = int64_t(spec.b) * spec.s_q * spec.h_q;
  std::vector<uint8_t> q(size_t(nq) * spec.d_qk * (spec.q_dtype == DType::kF32 ? 4 : 2));
  fill_normal(rng, spec.q_dtype, q.data(), nq * spec.d_qk, 1.0);
  const uint16_t bf16_nan = 0x7fc0;
  if (spec.nan_at == 1)  // channel 5 of row (b 0, s 0, h_q − 1)
    std::memcpy(&q[size_t((spec.h_q - 1) * spec.d_qk + 5) * 2], &bf16_nan, 2);
  if (spec.nan_at == 2 && cache.seqlens[0] > 0) {  // channel 3 of key 0 of sequence 0
    const int64_t slot = int64_t(cache.block_table[0]) * spec.page_size;
    std::memcpy(&cache.data[size_t(slot * cache.row_bytes + 3 * 2)], &bf16_nan, 2);
  }

  MlaDecodeParams p;
  set_decode_cache(cache, p);
  p.s_q = spec.s_q;
  p.h_q = spec.h_q;
  p.q_dtype = spec.q_dtype;
  p.q = q.data();
  p.softmax_scale = float(1.0 / std::sqrt(double(spec.d_qk)));  // unit-variance scores
  p.causal = spec.causal;

  std::vector<float> out_ref(size_t(nq) * spec.d_v), lse_ref(nq), abs_ref(out_ref.size());
  MlaDecodeParams pr = p;
  pr.out = out_ref.data();
  pr.lse = lse_ref.data();
  pr.abs_out = abs_ref.data();
  const auto* ref = select_variant(pr, "ref").value();
  const Status ref_status = run_variant(*ref, pr, default_thread_pool());
  if (!ref_status.ok()) {
    report(tally, op, cname, ref->name, false, ref_status.to_string());
    return;
  }
  bool any_visible = false;
  for (float l : lse_ref) any_visible |= std::isfinite(l);
  for (const auto& v : mla_decode_variants()) {
    if (v.backend == "ref" || !matches(opt, op, cname, v.name)) continue;
    if (!v.supports(p)) {
      report_unsupported(tally, op, cname, v.name);
      continue;
    }
    GuardedOutput out(out_ref.size()), lse(lse_ref.size());
    out.poison();
    lse.poison();
    MlaDecodeParams pv = p;
    pv.out = out.data();
    pv.lse = lse.data();
    const Status st = run_variant(v, pv, default_thread_pool());
    if (!st.ok()) {
      report(tally, op, cname, v.name, false, st.to_string());
      continue;
    }
    CompareRule out_rule = flashmla_out_rule();
    out_rule.cos_min = cos_bound(v.compute);
    // BF16 probabilities: FlashMLA's allowance plus the derived 2^-8 · Σ p|v| (compare.h).
    std::vector<double> bound;
    if (v.compute == Intermediates::kBf16Probs) {
      bound.resize(out_ref.size());
      bf16_probs_bound(out_ref.data(), abs_ref.data(), int64_t(out_ref.size()), out_rule,
                       bound.data());
    }
    const CompareStats so = compare(out_ref.data(), out.data(), int64_t(out_ref.size()), out_rule,
                                    bound.empty() ? nullptr : bound.data());
    const CompareStats sl =
        compare(lse_ref.data(), lse.data(), int64_t(lse_ref.size()), flashmla_lse_rule());
    const bool guards = out.guards_intact() && lse.guards_intact();
    const bool nonzero = !any_visible || !so.got_all_zero;
    std::string detail =
        fmt::format("out[{}] lse[{}]{}{}", so.to_string(), sl.to_string(),
                    guards ? "" : " GUARD BYTES OVERWRITTEN", nonzero ? "" : " ALL-ZERO OUTPUT");
    if (opt.perf) {
      const double sec = median_seconds(opt.perf_reps, [&] { v.run(pv, default_thread_pool()); });
      detail +=
          fmt::format(" time {:.3f} ms {:.1f} GFLOP/s", sec * 1e3, decode_flops(p) / sec * 1e-9);
      fmt::print("PERF {}/{} {} {:.3f} ms {:.1f} GFLOP/s\n", op, cname, v.name, sec * 1e3,
                 decode_flops(p) / sec * 1e-9);
    }
    report(tally, op, cname, v.name, so.pass && sl.pass && guards && nonzero, detail);
  }
}

}  // namespace

void add_mla_decode_cases(std::vector<OpCase>& cases, const Options& opt) {
  std::vector<DecodeSpec> specs;
  // FlashMLA's grid, two of the eight (page size, varlen, causal) combinations per shape, chosen by
  // rotation so that every combination occurs; shapes above the work budget are left to the
  // explicit large cases below.
  const int64_t budget = opt.quick ? (int64_t(1) << 14) : (int64_t(1) << 18);
  int rot = 0;
  for (int b : {1, 2, 6, 64})
    for (int s_q : {1, 2, 4})
      for (int s_kv : {20, 140, 4096})
        for (int h : {1, 3, 16, 64, 128}) {
          for (int k = 0; k < 2; ++k, ++rot) {
            const int combo = (rot * 3 + k) % 8;
            DecodeSpec s{b, s_q, s_kv, h, (combo & 1) ? 64 : 16, bool(combo & 2), bool(combo & 4)};
            s.seed = uint64_t(rot);
            if (s.work() <= budget) specs.push_back(s);
          }
        }
  // DeepSeek-V3 decode shapes and MTP-style s_q = 2, causal, beyond the budget.
  if (!opt.quick) {
    specs.push_back({1, 1, 4096, 128, 64, false, false});
    specs.push_back({1, 2, 4096, 128, 64, false, true});
    specs.push_back({4, 1, 1000, 128, 64, true, true});
  }
  // Awkward shapes: dims that are not multiples of any vector width, MiniCPM3 dims, F32 inputs,
  // one key past a page boundary, s_q > s_kv under causal masking (rows with no key), all empty.
  auto add = [&](DecodeSpec s, int d_qk, int d_v, DType qt, DType kt) {
    s.d_qk = d_qk;
    s.d_v = d_v;
    s.q_dtype = qt;
    s.kv_dtype = kt;
    specs.push_back(s);
  };
  add({3, 2, 65, 5, 16, true, true}, 37, 17, DType::kF32, DType::kF32);
  add({2, 1, 129, 40, 64, false, false}, 288, 256, DType::kBF16, DType::kBF16);
  add({2, 3, 17, 7, 16, false, true}, 576, 512, DType::kF32, DType::kBF16);
  add({1, 4, 2, 16, 16, false, true}, 576, 512, DType::kBF16, DType::kBF16);
  add({2, 1, 0, 16, 64, false, false}, 576, 512, DType::kBF16, DType::kBF16);
  add({1, 1, 65, 1, 64, false, false}, 576, 512, DType::kBF16, DType::kF32);
  add({2, 5, 200, 6, 16, true, true}, 80, 64, DType::kBF16, DType::kBF16);
  // BF16 cache with latent and rope not multiples of 32 (the AMX copy path), no rope at all,
  // pages of 32 (a multiple of 16: AMX keys in place) and of 24 (not), and a sequence long
  // enough to split into key ranges with partly filled 256-key steps, in quick mode too.
  add({2, 2, 150, 20, 16, false, true}, 200, 136, DType::kBF16, DType::kBF16);
  add({1, 2, 70, 16, 16, false, true}, 64, 64, DType::kBF16, DType::kBF16);
  add({1, 2, 700, 128, 32, false, true}, 576, 512, DType::kBF16, DType::kBF16);
  add({2, 1, 300, 16, 24, true, false}, 576, 512, DType::kBF16, DType::kBF16);
  add({2, 1, 300, 16, 24, true, false}, 576, 512, DType::kBF16, DType::kF8E4M3);
  // Quantised caches (core/kv_format.h): the reference reads the same records, so the rule is
  // as tight as for BF16; dims include a latent that is not a multiple of the scale blocks.
  for (DType kt : {DType::kF8E4M3, DType::kI8, DType::kE2M1}) {
    add({1, 1, 140, 16, 64, false, false}, 576, 512, DType::kBF16, kt);
    add({3, 2, 140, 3, 16, true, true}, 576, 512, DType::kF32, kt);
    add({2, 4, 20, 16, 16, false, true}, 576, 512, DType::kBF16, kt);
    add({2, 1, 77, 5, 16, false, false}, 200, 136, DType::kF32, kt);
    add({2, 2, 77, 5, 16, false, true}, 200, 136, DType::kBF16, kt);  // BF16 / AMX: code tails
    if (!opt.quick) add({1, 1, 4096, 128, 64, false, false}, 576, 512, DType::kBF16, kt);
  }
  // NaN must come out where the reference has it, also through key-range splits and their
  // LSE merge (the long cases split); page size 1; a split sequence with empty causal rows.
  for (int nan_at : {1, 2})
    for (int s_kv : {20, opt.quick ? 300 : 4096}) {
      DecodeSpec s{1, 2, s_kv, 16, 64, false, true};
      s.nan_at = nan_at;
      specs.push_back(s);
    }
  specs.push_back({2, 1, 70, 5, 1, true, false});
  specs.push_back({1, 200, 150, 1, 16, false, true});
  for (const auto& s : specs)
    cases.push_back(
        {"mla_decode", s.name(), [s](const Options& o, Tally& t) { run_decode_case(s, o, t); }});
}

}  // namespace mla::ops
