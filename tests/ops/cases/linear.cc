// linear cases: the weight products on the float dtypes (BF16, F16, F32, and E4M3 / int8 codes
// with a scale per block), every linear variant of the registry against the FP64 sum of
// kernels/ref, at decode-sized n (1, 4: the GEMV that streams W once) and prefill-sized n (37,
// 64: chunks of rows, and the BF16 GEMM above 16 rows), on both paths (kAuto: linear()'s math
// kF32, kBf16: math kBF16). The bounds are those of tests/unit/kernels/linear_test.cc, derived
// in tests/common/linear_bounds.h; the reference variant must give the FP64 sum rounded once.
// Perf mode times each variant.
#include <fmt/format.h>

#include <cmath>

#include "../harness.h"
#include "kernels/ref/linear_ref.h"
#include "linear_bounds.h"
#include "linear_run.h"
#include "linear_test_weight.h"

namespace mla::ops {
namespace {

struct LinearSpec {
  DType dtype;
  int64_t out, in;
  int block_rows, block_cols;  // the scale grid of FP8 / int8
  int64_t n;
  LinearPath path;
  std::string name() const {
    const bool scaled = linear_block_scaled(dtype);
    return fmt::format("{}_o{}_i{}{}_n{}_{}", dtype_name(dtype), out, in,
                       scaled ? fmt::format("_b{}x{}", block_rows, block_cols) : "", n,
                       path == LinearPath::kBf16 ? "bf16" : "f32");
  }
};

void run_linear_case(const LinearSpec& s, const Options& opt, Tally& tally) {
  const std::string op = "linear", cname = s.name();
  bool wanted = false;
  for (const auto& v : linear_variants()) wanted |= matches(opt, op, cname, v.name);
  if (!wanted) return;
  Rng rng(uint64_t(s.out * 31 + s.in * 7 + s.n) ^ uint64_t(s.dtype));
  // 1 byte past an aligned address for every dtype but F32 (3): weights inside an mmap'd file.
  const TestWeight t = make_weight(rng, s.dtype, s.out, s.in, s.dtype == DType::kF32 ? 3 : 1,
                                   s.block_rows, s.block_cols);
  const TestWeight a = abs_weight(t);
  std::vector<float> x(size_t(s.n * s.in)), xa(x.size());
  fill_normal(rng, DType::kF32, x.data(), int64_t(x.size()), 1.0);
  for (size_t k = 0; k < x.size(); ++k) xa[k] = std::fabs(x[k]);
  // want = x · W_realᵀ in FP64; abs_sum = |x| · |W|ᵀ (Σ_j |x_j·w_j| per output); w_abs_sum =
  // Σ_j |w_j| per weight row: what the bounds are made of.
  std::vector<double> want(size_t(s.n * s.out)), abs_sum(want.size()), w_abs_sum(size_t(s.out));
  ref::linear(t.w, s.n, x.data(), want.data());
  ref::linear(a.w, s.n, xa.data(), abs_sum.data());
  ref::linear(a.w, 1, std::vector<float>(size_t(s.in), 1.0f).data(), w_abs_sum.data());
  const double unit = gemm_unit(t);

  for (const LinearVariant& v : linear_variants()) {
    if (!matches(opt, op, cname, v.name)) continue;
    GuardedOutput y(want.size());
    if (!run_linear_case(v, t.w, s.n, x.data(), s.path, y, tally, op, cname)) continue;
    // FP32 products: |ŷ − y| ≤ γ_(in+2)·Σ|x·w| (widening exact but for one rounding of a block
    // scale, every summation order within γ_in). The BF16 GEMM, where this variant takes it
    // (takes_bf16_gemm): x rounded to BF16 (2^-8) on top, and F32 weights rounded alike
    // (bound_bf16). The reference: exactly the FP64 sum rounded to FP32 once.
    const bool gemm = takes_bf16_gemm(v.compute, s.path, s.n, t.w);
    double worst = 0;  // the largest |error| / bound
    bool finite = true, exact = true, all_zero = true;
    for (size_t k = 0; k < want.size(); ++k) {
      const double got = y.data()[k];
      finite = finite && std::isfinite(got);
      exact = exact && float(got) == float(want[k]);
      all_zero = all_zero && got == 0;
      const double b = gemm ? bound_bf16(s.in, abs_sum[k], w_abs_sum[k % size_t(s.out)], unit,
                                         s.dtype == DType::kF32)
                            : bound(s.in, abs_sum[k]);
      worst = std::max(worst, std::fabs(got - want[k]) / b);
    }
    if (opt.perf) {
      const double sec = median_seconds(opt.perf_reps, [&] {
        run_product(v, t.w, s.n, x.data(), y.data(), default_thread_pool(), s.path);
      });
      fmt::print("PERF {}/{} {} {:.3f} ms\n", op, cname, v.name, sec * 1e3);
    }
    const bool guards = y.guards_intact();
    const bool close = v.backend == "ref" ? exact : worst <= 1.0;
    report(
        tally, op, cname, v.name, finite && close && guards && !all_zero,
        fmt::format("max |error| / bound {:.3g} ({}){}{}{}", worst,
                    v.backend == "ref" ? "ref: FP64 sum rounded once"
                                       : (gemm ? "bf16 gemm" : "fp32 products"),
                    v.backend == "ref" && !exact ? " NOT THE FP64 SUM ROUNDED ONCE" : "",
                    all_zero ? " ALL-ZERO OUTPUT" : "", guards ? "" : " GUARD BYTES OVERWRITTEN"));
  }
}

}  // namespace

void add_linear_cases(std::vector<OpCase>& cases, const Options& opt) {
  struct Shape {
    int64_t out, in;
    int block_rows, block_cols;
  };
  // A scale grid ragged at both edges (2 × 3 blocks of 128), an MLA-sized product (kv_a-like
  // rows of 512), and small blocks with a tail in every segment (odd block rows; even block
  // columns, so the BF16 GEMM takes FP8).
  std::vector<Shape> shapes = {{200, 300, 128, 128}, {50, 70, 16, 24}};
  if (!opt.quick) shapes.push_back({576, 512, 128, 128});
  std::vector<int64_t> ns = {1, 4, 37};
  if (!opt.quick) ns.push_back(64);
  std::vector<LinearSpec> specs;
  for (DType t : {DType::kBF16, DType::kF16, DType::kF32, DType::kF8E4M3, DType::kI8})
    for (const Shape& sh : shapes)
      for (int64_t n : ns)
        for (LinearPath path : {LinearPath::kAuto, LinearPath::kBf16})
          specs.push_back({t, sh.out, sh.in, sh.block_rows, sh.block_cols, n, path});
  for (const auto& s : specs)
    cases.push_back(
        {"linear", s.name(), [s](const Options& o, Tally& t) { run_linear_case(s, o, t); }});
}

}  // namespace mla::ops
