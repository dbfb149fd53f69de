// Q8_0 and Q4_K weights repacked at load (DType::kQ8_0R16, kQ4_KR16, core/ggml_repack.h): the
// repacked rows decode to the file rows bit for bit, linear() on them stays inside the bound of
// the kernel each CPU variant runs (the R16 GEMVs and the int8 GEMM with VNNI, FP32 decoding
// without) at decode and prefill row counts, linear_many equals linear, and bad shapes are
// refused.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "core/ggml_quant.h"
#include "core/ggml_repack.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "kernels/linear.h"
#include "kernels/ref/linear_ref.h"
#include "linear_ggml_bounds.h"
#include "linear_run.h"

namespace mla {
namespace {

using Shapes = std::vector<std::pair<int64_t, int64_t>>;

TEST(RepackedRows, RowsDecodeAsTheFileRowsBitForBit) {
  for (const auto& [file, packed_t, shapes] :
       {std::tuple{DType::kQ8_0, DType::kQ8_0R16, Shapes{{16, 64}, {48, 1408}, {32, 2048}}},
        std::tuple{DType::kQ4_K, DType::kQ4_KR16, Shapes{{16, 256}, {48, 1536}, {32, 2048}}}}) {
    for (const auto& [out, in] : shapes) {
      const test::BlockWeight q = test::make_weight(file, out, in, uint64_t(out + in));
      std::vector<uint8_t> packed(size_t(out * dtype_bytes(file, in)));
      repack_rows(packed_t, q.w.data, out, in, packed.data());
      std::vector<float> a(static_cast<size_t>(in)), b(static_cast<size_t>(in));
      std::vector<uint8_t> row(size_t(dtype_bytes(file, in)));
      for (int64_t o = 0; o < out; ++o) {
        ASSERT_TRUE(dequantize_weight_row(file, q.w.data, in, o, a.data()).ok());
        ASSERT_TRUE(dequantize_weight_row(packed_t, packed.data(), in, o, b.data()).ok());
        ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4)) << "row " << o;
        if (packed_t == DType::kQ4_KR16) {  // every byte is kept, only moved
          gather_q4_k_r16_row(packed.data(), in, o, row.data());
          ASSERT_EQ(0, std::memcmp(row.data(), q.w.data + o * int64_t(row.size()), row.size()));
        }
      }
    }
  }
}

TEST(RepackedRows, EveryCpuVariantMatchesTheReference) {
  ThreadPool pool(2);
  for (const auto& [t, out, in] : {std::tuple{DType::kQ8_0R16, 16, 64},
                                   {DType::kQ8_0R16, 48, 192},
                                   {DType::kQ8_0R16, 64, 1408},
                                   {DType::kQ8_0R16, 160, 512},
                                   {DType::kQ4_KR16, 16, 256},
                                   {DType::kQ4_KR16, 48, 512},
                                   {DType::kQ4_KR16, 64, 1536},
                                   {DType::kQ4_KR16, 160, 2048}}) {
    const test::BlockWeight bw = test::make_weight(t, out, in, uint64_t(out * 3 + in));
    for (int64_t n : {1, 2, 3, 4, 5, 9, 17, 40}) {
      Rng rng(uint64_t(n * 11 + in));
      std::vector<float> x(size_t(n * in));
      for (float& v : x) v = float(rng.normal());
      if (n > 2) x[5] = 0;
      if (n > 3) x[size_t(in) + 1] = 40.0f;  // a large value in one block
      std::vector<double> ref(size_t(n * out));
      ref::linear(bw.w, n, x.data(), ref.data());
      for (const LinearVariant* v : cpu_linear_variants_here()) {
        for (LinearPath path : {LinearPath::kAuto, LinearPath::kBf16}) {
          std::vector<float> y(size_t(n * out), -1.0f);
          run_product(*v, bw.w, n, x.data(), y.data(), pool, path);
          int bad = 0;
          for (int64_t i = 0; i < n; ++i) {
            const std::vector<float> xi(x.begin() + i * in, x.begin() + (i + 1) * in);
            for (int64_t o = 0; o < out; ++o) {
              const double b = test::block_bound(v->name, path, n, t, xi, bw.rows[size_t(o)],
                                                 bw.mags[size_t(o)]);
              const double got = y[size_t(i * out + o)], want = ref[size_t(i * out + o)];
              if (!(std::fabs(got - want) <= b) && ++bad <= 3)
                ADD_FAILURE() << v->name << " " << dtype_name(t) << " [" << out << ", " << in
                              << "] n=" << n << " y[" << i << "][" << o << "] = " << got
                              << ", want " << want << " ± " << b;
            }
          }
          ASSERT_EQ(bad, 0);
        }
      }
    }
  }
}

// The repacked weight next to a plain Q8_0 one on the same x: linear_many runs each as linear
// does (the two quantise x in their own layouts).
TEST(RepackedRows, LinearManyEqualsLinear) {
  ThreadPool pool(2);
  const int64_t in = 256;
  for (DType t : {DType::kQ8_0R16, DType::kQ4_KR16}) {
    const test::BlockWeight a = test::make_weight(t, 64, in, 1),
                            b = test::make_weight(DType::kQ8_0, 24, in, 2);
    EXPECT_EQ(linear_many_difference(a.w, b.w, in, pool), "");
  }
}

TEST(RepackedRows, RefusesShapesItCannotHold) {
  uint8_t bytes[16 * 34 * 2] = {};
  LinearWeight w{DType::kQ8_0R16, bytes, 16, 64};
  EXPECT_TRUE(validate(w).ok());
  w.out = 8;  // not whole groups of 16 rows
  EXPECT_FALSE(validate(w).ok());
  w.out = 16;
  w.in = 32;  // not whole units of 64 values
  const Status s = validate(w);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("Q8_0_R16"), std::string::npos) << s.message();
  uint8_t k_bytes[16 * 144] = {};
  LinearWeight k{DType::kQ4_KR16, k_bytes, 16, 256};
  EXPECT_TRUE(validate(k).ok());
  k.out = 8;
  EXPECT_FALSE(validate(k).ok());
  k.out = 16;
  k.in = 128;  // not whole super-blocks
  const Status ks = validate(k);
  EXPECT_FALSE(ks.ok());
  EXPECT_NE(ks.message().find("Q4_K_R16"), std::string::npos) << ks.message();
}

TEST(RepackedRows, Q8_0AndQ4_KPreferredWhereTheyFitOnAVnniVariant) {
  const bool repacks = cpu_linear_variants_here().front()->repacks_blocks;
  EXPECT_EQ(linear_preferred_dtype(DType::kQ8_0, 2048, 1408),
            repacks ? DType::kQ8_0R16 : DType::kQ8_0);
  EXPECT_EQ(linear_preferred_dtype(DType::kQ8_0, 2048, 1408, "ref"), DType::kQ8_0);
  EXPECT_EQ(linear_preferred_dtype(DType::kQ8_0, 40, 1408), DType::kQ8_0);
  EXPECT_EQ(linear_preferred_dtype(DType::kQ8_0, 2048, 96), DType::kQ8_0);
  EXPECT_EQ(linear_preferred_dtype(DType::kQ4_K, 2048, 2048),
            repacks ? DType::kQ4_KR16 : DType::kQ4_K);
  EXPECT_EQ(linear_preferred_dtype(DType::kQ4_K, 40, 2048), DType::kQ4_K);
  EXPECT_EQ(linear_preferred_dtype(DType::kQ6_K, 2048, 2048), DType::kQ6_K);
}

}  // namespace
}  // namespace mla
