// linear() with GGUF block-format weights (Q8_0, Q4_0, Q2_K ... Q6_K): every CPU variant against
// the FP64 reference of the dequantised weights (kernels/ref, core/ggml_quant.h's decoders), on
// shapes around the register blocks and the odd 32-block count, and through linear_many; path
// kBf16 above 16 rows of x on the int8 GEMMs (every format with VNNI, Q8_0 / Q4_0 without).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/ggml_quant.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "kernels/linear.h"
#include "kernels/ref/linear_ref.h"
#include "linear_ggml_bounds.h"
#include "linear_run.h"

namespace mla {
namespace {

using test::BlockWeight;
using test::make_weight;

class LinearGgmlTest : public ::testing::TestWithParam<DType> {};

TEST_P(LinearGgmlTest, EveryCpuVariantMatchesTheReference) {
  const DType t = GetParam();
  if (!can_quantize(t)) GTEST_SKIP() << dtype_name(t) << " has no quantiser yet";
  const int64_t be = dtype_block(t).elems;
  ThreadPool pool(2);
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {1, be},
      {7, 3 * be},
      {19, 2 * be},
      {64, be == 32 ? 576 : 512},
      {21, 512},
      // 150 rows: chunks of 32 (two strips, the int8 GEMM's two-strip tile) and a last chunk
      // of 22 whose second strip is 6 rows wide.
      {150, 2 * be}};
  for (const auto& [out, in] : shapes) {
    BlockWeight bw = make_weight(t, out, in, uint64_t(out * 131 + in));
    // 17, 40: the int8 GEMMs' first rows on path kBf16; 66: Q6_K's GEMM without VNNI (from 64
    // rows), with a last register tile of 2 rows of x.
    for (int64_t n : {1, 2, 3, 4, 5, 17, 40, 66}) {
      Rng rng(uint64_t(n * 7 + in));
      std::vector<float> x(size_t(n * in));
      for (float& v : x) v = float(rng.normal());
      if (n > 2) x[5] = 0;  // a zero and a large value in some block
      if (n > 3) x[size_t(in) + 1] = 40.0f;
      std::vector<double> ref(size_t(n * out));
      ref::linear(bw.w, n, x.data(), ref.data());
      for (const LinearVariant* v : cpu_linear_variants_here()) {
        std::vector<float> y(size_t(n * out), -1.0f);
        for (LinearPath path : {LinearPath::kAuto, LinearPath::kBf16}) {
          run_product(*v, bw.w, n, x.data(), y.data(), pool, path);
          int bad = 0;
          for (int64_t i = 0; i < n; ++i)
            for (int64_t o = 0; o < out; ++o) {
              const std::vector<float> xi(x.begin() + i * in, x.begin() + (i + 1) * in);
              const double b = test::block_bound(v->name, path, n, t, xi, bw.rows[size_t(o)],
                                                 bw.mags[size_t(o)]);
              const double got = y[size_t(i * out + o)], want = ref[size_t(i * out + o)];
              if (!(std::fabs(got - want) <= b) && ++bad <= 3)
                ADD_FAILURE() << v->name << " " << dtype_name(t) << " [" << out << ", " << in
                              << "] n=" << n << " y[" << i << "][" << o << "] = " << got
                              << ", want " << want << " ± " << b;
            }
          ASSERT_EQ(bad, 0);
        }
      }
    }
  }
}

// linear_many gives each job what linear gives it, and jobs with one x share its quantisation.
TEST_P(LinearGgmlTest, LinearManyEqualsLinear) {
  const DType t = GetParam();
  if (!can_quantize(t)) GTEST_SKIP();
  const int64_t in = dtype_block(t).elems * 4;
  ThreadPool pool(2);
  BlockWeight a = make_weight(t, 24, in, 1), b = make_weight(t, 9, in, 2);
  for (int64_t n : {1, 6}) {
    std::vector<float> x(size_t(n * in));
    Rng rng(3);
    for (float& v : x) v = float(rng.normal());
    std::vector<float> ya(size_t(n * 24)), yb(size_t(n * 9)), ma(ya.size()), mb(yb.size());
    ASSERT_TRUE(linear(a.w, n, x.data(), ya.data(), pool).ok());
    ASSERT_TRUE(linear(b.w, n, x.data(), yb.data(), pool).ok());
    const LinearJob jobs[] = {{&a.w, n, x.data(), ma.data()}, {&b.w, n, x.data(), mb.data()}};
    ASSERT_TRUE(linear_many(jobs, pool).ok());
    EXPECT_EQ(ya, ma);
    EXPECT_EQ(yb, mb);
  }
}

// Jobs with one x but weights of 32- and 256-value blocks quantise x once per layout.
TEST(LinearGgml, LinearManyMixesBlockSizes) {
  const int64_t in = 512;
  ThreadPool pool(2);
  BlockWeight a = make_weight(DType::kQ8_0, 16, in, 4), b = make_weight(DType::kQ4_K, 16, in, 5),
              c = make_weight(DType::kQ6_K, 8, in, 6);
  for (int64_t n : {1, 6}) {
    std::vector<float> x(size_t(n * in));
    Rng rng(7);
    for (float& v : x) v = float(rng.normal());
    std::vector<float> ya(size_t(n * 16)), yb(ya.size()), yc(size_t(n * 8));
    std::vector<float> ma(ya.size()), mb(yb.size()), mc(yc.size());
    ASSERT_TRUE(linear(a.w, n, x.data(), ya.data(), pool).ok());
    ASSERT_TRUE(linear(b.w, n, x.data(), yb.data(), pool).ok());
    ASSERT_TRUE(linear(c.w, n, x.data(), yc.data(), pool).ok());
    const LinearJob jobs[] = {{&a.w, n, x.data(), ma.data()},
                              {&b.w, n, x.data(), mb.data()},
                              {&c.w, n, x.data(), mc.data()}};
    ASSERT_TRUE(linear_many(jobs, pool).ok());
    EXPECT_EQ(ya, ma);
    EXPECT_EQ(yb, mb);
    EXPECT_EQ(yc, mc);
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, LinearGgmlTest,
                         ::testing::Values(DType::kQ8_0, DType::kQ4_0, DType::kQ2_K, DType::kQ3_K,
                                           DType::kQ4_K, DType::kQ5_K, DType::kQ6_K),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(LinearGgml, RejectsRowsThatAreNotWholeBlocks) {
  uint8_t bytes[64] = {};
  LinearWeight w{DType::kQ8_0, bytes, 1, 48};
  EXPECT_FALSE(validate(w).ok());
  w.in = 32;
  EXPECT_TRUE(validate(w).ok());
}

}  // namespace
}  // namespace mla
