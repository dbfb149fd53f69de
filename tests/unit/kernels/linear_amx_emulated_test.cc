// linear.cpu.amx's driver path on any CPU with AVX512_BF16 and VBMI: the AMX variant's traits
// with the tile unit replaced by plain loops (tests/common/amx_loop_tiles.h), run through
// run_linear_many as the variant runs, against the FP64 reference within the BF16 GEMM's bound,
// for every weight layout the GEMM takes, x rows in and after whole blocks of 16, and padding rows.
#include "kernels/cpu/isa_prelude.h"
#include "kernels/cpu/linear_cpu.h"
#include "kernels/cpu/scratch.h"

#pragma GCC push_options
#pragma GCC target( \
    "avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi,avx512bf16,avx512vnni,avx2,fma,f16c")
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "amx_loop_tiles.h"
#include "kernels/cpu/linear_avx512_bf16_traits.h"

namespace mla::cpu {
namespace {

struct LinLoopAmx : LinAvx512Bf16Base<LinLoopAmx> {
  static constexpr bool kAmx = true;
  using AmxTiles = test::AmxLoopTiles;
};

void linear_loop_amx(const LinearParams& p, ThreadPool& pool) {
  run_linear_many<LinLoopAmx>(p.jobs, pool, p.path);
}

}  // namespace
}  // namespace mla::cpu

#pragma GCC diagnostic pop
#pragma GCC pop_options

#include <gtest/gtest.h>

#include "core/cpu_features.h"
#include "core/ggml_repack.h"
#include "core/rng.h"
#include "kernels/ref/linear_ref.h"
#include "linear_bounds.h"
#include "linear_test_weight.h"

namespace mla {
namespace {

TEST(LinearAmxEmulated, MatchesTheReferenceOnEveryLayoutTheGemmTakes) {
  if (!cpu_features().avx512_bf16 || !cpu_features().avx512_vbmi)
    GTEST_SKIP() << "no AVX512_BF16 + VBMI here";
  ThreadPool pool(3);
  Rng rng(29);
  struct Shape {
    DType t;
    int64_t out, in;
  };
  // out 40: a chunk whose last vector has padding rows; in 320 / 2048: whole 16-pair steps;
  // in 300: not (the vdpbf16ps tiles take every row).
  for (const Shape& s : {Shape{DType::kBF16, 40, 320}, Shape{DType::kBF16R16, 96, 2048},
                         Shape{DType::kF8E4M3, 40, 320}, Shape{DType::kF8E4M3R16, 160, 2048},
                         Shape{DType::kF32, 48, 320}, Shape{DType::kBF16, 48, 300}}) {
    const bool r16 = dtype_is_row_interleaved(s.t);
    const DType stored = r16 ? r16_file_dtype(s.t) : s.t;
    const TestWeight t = make_weight(rng, stored, s.out, s.in, 1);
    std::vector<uint8_t> packed;
    LinearWeight w = t.w;
    if (r16) {
      packed.resize(size_t(dtype_bytes(stored, s.in) * s.out));
      repack_rows(s.t, t.w.data, s.out, s.in, packed.data());
      w.dtype = s.t;
      w.data = packed.data();
    }
    const TestWeight a = abs_weight(t);
    std::vector<double> w_abs_sum(static_cast<size_t>(s.out));
    ref::linear(a.w, 1, std::vector<float>(size_t(s.in), 1.0f).data(), w_abs_sum.data());
    for (int64_t n : {17, 32, 45, 64}) {  // 45 = 32 + 13: rows after the last whole block
      std::vector<float> x(size_t(n * s.in)), xa(x.size()), y(size_t(n * s.out));
      for (size_t k = 0; k < x.size(); ++k) xa[k] = std::abs(x[k] = float(rng.normal()));
      std::vector<double> want(y.size()), abs_sum(y.size());
      ref::linear(t.w, n, x.data(), want.data());
      ref::linear(a.w, n, xa.data(), abs_sum.data());
      const LinearJob job{&w, n, x.data(), y.data()};
      cpu::linear_loop_amx(LinearParams{{&job, 1}, LinearPath::kBf16}, pool);
      for (size_t k = 0; k < y.size(); ++k) {
        const double b = bound_bf16(s.in, abs_sum[k], w_abs_sum[k % size_t(s.out)], gemm_unit(t),
                                    stored == DType::kF32);
        ASSERT_LE(std::abs(double(y[k]) - want[k]), b)
            << dtype_name(s.t) << " [" << s.out << ", " << s.in << "] n " << n << " element " << k;
      }
      // A row's output does not depend on the other rows: the first 17 rows alone give the
      // same bits (row 16 alone in its block of 16 there, among 16 rows here).
      std::vector<float> y17(size_t(17 * s.out));
      const LinearJob first{&w, 17, x.data(), y17.data()};
      cpu::linear_loop_amx(LinearParams{{&first, 1}, LinearPath::kBf16}, pool);
      for (size_t k = 0; k < y17.size(); ++k)
        ASSERT_EQ(y17[k], y[k]) << dtype_name(s.t) << " n " << n << " element " << k;
    }
  }
}

}  // namespace
}  // namespace mla
