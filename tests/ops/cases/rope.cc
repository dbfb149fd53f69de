// rope cases: the RoPE rotation over a cos / sin table (kernels/rope_table.h), every RoPE variant
// of the registry against the reference variant (cos / sin and the rotation in FP64 from the
// table's config, stored FP32), in both pair layouts, plain RoPE, YaRN (with and without an
// attention factor) and LongRoPE, on query rows ([q_nope | q_pe], several heads) and latent rows
// ([c_kv | k_pe], one head), at positions from 0 to 163,839. The bound is derived below; the
// channels outside [offset, offset + dim) must come back bit for bit, and the rows sit between
// guard regions. Perf mode times each variant.
#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "../harness.h"
#include "kernels/rope_table.h"

namespace mla::ops {
namespace {

struct RopeSpec {
  std::string scaling;  // "plain", "yarn", "yarn_mscale", "longrope"
  RopeLayout layout;
  int dim, n_heads;
  int64_t offset, row_stride;
  std::string name() const {
    return fmt::format("{}_{}_d{}_h{}_off{}_stride{}", scaling,
                       layout == RopeLayout::kNeox ? "neox" : "interleaved", dim, n_heads, offset,
                       row_stride);
  }
  RopeConfig config() const {
    RopeConfig c;
    c.dim = dim;
    c.layout = layout;
    if (scaling == "yarn" || scaling == "yarn_mscale") {
      // DeepSeek-V3's YaRN (factor 40 over 4096 positions); "yarn_mscale" sets mscale_all_dim 0,
      // so the attention factor g(40, 1) / g(40, 0) = 1 + 0.1·ln 40 ≈ 1.369 is folded into the
      // table (every released config has mscale == mscale_all_dim: factor 1).
      c.scaling.yarn = true;
      c.scaling.factor = 40;
      c.scaling.original_max_position = 4096;
      c.scaling.beta_fast = 32;
      c.scaling.beta_slow = 1;
      c.scaling.mscale = 1;
      c.scaling.mscale_all_dim = scaling == "yarn" ? 1 : 0;
    } else if (scaling == "longrope") {  // MiniCPM3-style: a factor per pair, attention factor
      for (int i = 0; i < dim / 2; ++i) c.scaling.longrope_ext.push_back(1.0 + 0.37 * i);
      c.scaling.longrope_attention = 1.19;
    }
    return c;
  }
};

void run_rope_case(const RopeSpec& s, const std::vector<int64_t>& positions, const Options& opt,
                   Tally& tally) {
  const std::string op = "rope", cname = s.name();
  bool wanted = false;
  for (const auto& v : rope_variants())
    wanted |= v.backend != "ref" && matches(opt, op, cname, v.name);
  if (!wanted) return;
  const RopeConfig cfg = s.config();
  int64_t max_pos = 0;
  for (int64_t p : positions) max_pos = std::max(max_pos, p);
  auto table = make_rope_table(cfg, max_pos + 1);
  if (!table.ok()) {
    report(tally, op, cname, "make_rope_table", false, table.status().to_string());
    return;
  }
  const int n_tokens = int(positions.size());
  const size_t n = size_t(n_tokens) * s.n_heads * size_t(s.row_stride);
  Rng rng(uint64_t(s.dim * 131 + s.n_heads * 7 + s.offset));
  std::vector<float> x(n);
  fill_normal(rng, DType::kF32, x.data(), int64_t(n), 1.0);
  RopeParams p{&*table, positions.data(), n_tokens, s.n_heads, s.row_stride, s.offset, nullptr};

  std::vector<float> want = x;
  RopeParams pr = p;
  pr.x = want.data();
  const auto* ref = select_variant(pr, "ref").value();
  const Status ref_status = run_variant(*ref, pr, default_thread_pool());
  if (!ref_status.ok()) {
    report(tally, op, cname, ref->name, false, ref_status.to_string());
    return;
  }
  const double factor = std::hypot(double(table->cos[0]), double(table->sin[0]));  // position 0
  const int half = s.dim / 2;
  const bool il = s.layout == RopeLayout::kInterleaved;
  for (const auto& v : rope_variants()) {
    if (v.backend == "ref" || !matches(opt, op, cname, v.name)) continue;
    if (!v.supports(p)) {
      report_unsupported(tally, op, cname, v.name);
      continue;
    }
    GuardedOutput got(n);
    std::memcpy(got.data(), x.data(), n * sizeof(float));
    RopeParams pv = p;
    pv.x = got.data();
    const Status st = run_variant(v, pv, default_thread_pool());
    if (!st.ok()) {
      report(tally, op, cname, v.name, false, st.to_string());
      continue;
    }
    // Per pair (x_a, x_b) with c = F·cos θ, s = F·sin θ in FP64 (F the attention factor), the
    // same doubles in both: the table holds them rounded to FP32 (relative u = 2^-24 each), the
    // kernel's two products and their sum round once each (FMA contraction only removes
    // roundings): (2u + u²)(1 + u)·T + u·|y| with T = |x_a·c| + |x_b·s| ≥ |y|. The reference
    // rounds its FP64 result (error ≤ 2^-52·T) to FP32 once: u·|y| more. In all ≤ (4u + 4u²)·T,
    // and T ≤ F·hypot(x_a, x_b) (Cauchy–Schwarz, c² + s² = F²(1 + O(2^-52))):
    //   |Δ| ≤ 4u·(1 + 2^-22)·F·hypot(x_a, x_b).
    // F is read back from the table at position 0 (cos 0 = 1, sin 0 = 0, so the stored value is
    // F rounded once: the 2^-22 covers it). As tests/unit/kernels/rope_cpu_test.cc, with |x_a| +
    // |x_b| there bounded more tightly by the hypotenuse.
    const double u = std::ldexp(1.0, -24);
    double worst = 0;
    bool untouched = true, finite = true;
    for (int t = 0; t < n_tokens; ++t)
      for (int h = 0; h < s.n_heads; ++h) {
        const size_t row = (size_t(t) * s.n_heads + h) * size_t(s.row_stride);
        for (int64_t c = 0; c < s.row_stride; ++c)  // the rest of the row: not touched
          if (c < s.offset || c >= s.offset + s.dim)
            untouched = untouched && std::memcmp(&got.data()[row + c], &x[row + c], 4) == 0;
        const float* in = &x[row + s.offset];
        for (int i = 0; i < half; ++i) {
          const int a = il ? 2 * i : i, b = il ? 2 * i + 1 : i + half;
          const double bound =
              4 * u * (1 + std::ldexp(1.0, -22)) * factor * std::hypot(double(in[a]), in[b]);
          for (int k : {a, b}) {
            const double g = got.data()[row + s.offset + k], w = want[row + s.offset + k];
            finite = finite && std::isfinite(g);
            worst = std::max(worst, std::fabs(g - w) / bound);
          }
        }
      }
    if (opt.perf) {
      const double sec = median_seconds(opt.perf_reps, [&] { v.run(pv, default_thread_pool()); });
      fmt::print("PERF {}/{} {} {:.3f} ms\n", op, cname, v.name, sec * 1e3);
    }
    const bool guards = got.guards_intact();
    report(tally, op, cname, v.name, finite && worst <= 1.0 && untouched && guards,
           fmt::format("max |error| / bound {:.3g}, {} positions up to {}{}{}", worst, n_tokens,
                       max_pos, untouched ? "" : " CHANNELS OUTSIDE THE ROTATION CHANGED",
                       guards ? "" : " GUARD BYTES OVERWRITTEN"));
  }
}

}  // namespace

void add_rope_cases(std::vector<OpCase>& cases, const Options& opt) {
  // Small positions, both sides of YaRN's original context (4096), and the far end of a 160K
  // context (V3's 163,840), where an FP32 angle would be off by radians; --quick (ASan) stops at
  // 32,767 to keep the tables small.
  std::vector<int64_t> positions = {0, 1, 2, 7, 4095, 4096, 32767};
  if (!opt.quick) positions.insert(positions.end(), {65535, 100003, 163839});
  struct Rows {
    int dim, n_heads;
    int64_t offset, row_stride;
  };
  // Query rows [q_nope 128 | q_pe 64] of 3 heads, latent rows [c_kv 512 | k_pe 64] of one,
  // MiniCPM3's d_r = 32 after q_nope 64.
  const Rows rows[] = {{64, 3, 128, 192}, {64, 1, 512, 576}, {32, 2, 64, 96}};
  for (const char* scaling : {"plain", "yarn", "yarn_mscale", "longrope"})
    for (RopeLayout layout : {RopeLayout::kInterleaved, RopeLayout::kNeox})
      for (const Rows& r : rows) {
        if (opt.quick && r.offset == 512) continue;
        const RopeSpec s{scaling, layout, r.dim, r.n_heads, r.offset, r.row_stride};
        cases.push_back({"rope", s.name(), [s, positions](const Options& o, Tally& t) {
                           run_rope_case(s, positions, o, t);
                         }});
      }
}

}  // namespace mla::ops
