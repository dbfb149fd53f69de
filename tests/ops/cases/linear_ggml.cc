// linear_ggml cases: the weight products on GGUF block-format weights, every linear variant of
// the registry against the FP64 reference of the decoded weights (kernels/ref), within the bound
// of the kernel the variant runs (tests/common/linear_ggml_bounds.h: FP32 decoding, the integer
// GEMVs, the int8 GEMM); the reference variant must give that FP64 sum rounded once. Perf mode
// times each variant.
#include <fmt/format.h>

#include <cmath>

#include "../harness.h"
#include "kernels/ref/linear_ref.h"
#include "linear_ggml_bounds.h"
#include "linear_run.h"

namespace mla::ops {
namespace {

struct GgmlSpec {
  DType dtype;
  int64_t out, in, n;
  LinearPath path;
  std::string name() const {
    return fmt::format("{}_o{}_i{}_n{}_{}", dtype_name(dtype), out, in, n,
                       path == LinearPath::kBf16 ? "bf16" : "dot");
  }
};

void run_ggml_case(const GgmlSpec& s, const Options& opt, Tally& tally) {
  const std::string op = "linear_ggml", cname = s.name();
  bool wanted = false;
  for (const auto& v : linear_variants()) wanted |= matches(opt, op, cname, v.name);
  if (!wanted) return;
  const test::BlockWeight bw = test::make_weight(s.dtype, s.out, s.in, uint64_t(s.out * 7 + s.in));
  Rng rng(uint64_t(s.n * 13 + s.in));
  std::vector<float> x(size_t(s.n * s.in));
  fill_normal(rng, DType::kF32, x.data(), int64_t(x.size()), 1.0);
  std::vector<double> ref(size_t(s.n * s.out));
  ref::linear(bw.w, s.n, x.data(), ref.data());
  for (const LinearVariant& v : linear_variants()) {
    if (!matches(opt, op, cname, v.name)) continue;
    GuardedOutput y(size_t(s.n * s.out));
    if (!run_linear_case(v, bw.w, s.n, x.data(), s.path, y, tally, op, cname)) continue;
    double worst = 0;  // the largest |error| / bound
    bool finite = true, exact = true;
    for (int64_t i = 0; i < s.n; ++i) {
      const std::vector<float> xi(x.begin() + i * s.in, x.begin() + (i + 1) * s.in);
      for (int64_t o = 0; o < s.out; ++o) {
        const double got = y.data()[i * s.out + o], want = ref[size_t(i * s.out + o)];
        finite = finite && std::isfinite(got);
        exact = exact && float(got) == float(want);
        const double b = test::block_bound(v.name, s.path, s.n, s.dtype, xi, bw.rows[size_t(o)],
                                           bw.mags[size_t(o)]);
        worst = std::max(worst, std::fabs(got - want) / b);
      }
    }
    if (opt.perf) {
      const double sec = median_seconds(opt.perf_reps, [&] {
        run_product(v, bw.w, s.n, x.data(), y.data(), default_thread_pool(), s.path);
      });
      fmt::print("PERF {}/{} {} {:.3f} ms\n", op, cname, v.name, sec * 1e3);
    }
    const bool guards = y.guards_intact();
    const bool close = v.backend == "ref" ? exact : worst <= 1.0;
    report(tally, op, cname, v.name, finite && close && guards,
           fmt::format("max |error| / bound {:.3g}{}{}", worst,
                       v.backend == "ref" && !exact ? " NOT THE FP64 SUM ROUNDED ONCE" : "",
                       guards ? "" : " GUARD BYTES OVERWRITTEN"));
  }
}

}  // namespace

void add_linear_ggml_cases(std::vector<OpCase>& cases, const Options& opt) {
  std::vector<GgmlSpec> specs;
  for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kQ2_K, DType::kQ3_K, DType::kQ4_K,
                  DType::kQ5_K, DType::kQ6_K}) {
    if (!can_quantize(t)) continue;
    const int64_t be = dtype_block(t).elems;
    // Decode rows and a prefill chunk; one row length not a multiple of 256 for the 32-value
    // formats (the int8 GEMM pads it), and out not a multiple of 16 (a partial strip).
    for (int64_t n : {int64_t(1), int64_t(4), int64_t(opt.quick ? 20 : 40)})
      for (auto path : {LinearPath::kDot, LinearPath::kBf16})
        specs.push_back({t, 37, be == 32 ? 1408 : 512, n, path});
  }
  // Q8_0 and Q4_K repacked at load (16-row groups, rows of whole 64-value units / super-blocks).
  for (int64_t n : {int64_t(1), int64_t(4), int64_t(opt.quick ? 20 : 40)})
    for (auto path : {LinearPath::kDot, LinearPath::kBf16}) {
      specs.push_back({DType::kQ8_0R16, 48, 1408, n, path});
      specs.push_back({DType::kQ4_KR16, 48, 512, n, path});
    }
  for (const auto& s : specs)
    cases.push_back(
        {"linear_ggml", s.name(), [s](const Options& o, Tally& t) { run_ggml_case(s, o, t); }});
}

}  // namespace mla::ops
