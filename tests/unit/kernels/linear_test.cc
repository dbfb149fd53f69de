// linear() (kernels/linear.h): every CPU variant and path against the FP64 reference for each
// weight dtype, on awkward shapes (ragged FP8 scale blocks, in not a multiple of the vector width,
// n around the register-block and path thresholds), weights at unaligned addresses; FP8 NaN
// bytes; and the argument checks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/rng.h"
#include "core/thread_pool.h"
#include "kernels/linear.h"
#include "kernels/ref/linear_ref.h"
#include "kernels/registry.h"
#include "linear_bounds.h"
#include "linear_run.h"
#include "linear_test_weight.h"

namespace mla {
namespace {

// Checks y against the reference; returns the number of mismatches (reports the first few).
// `bf16`: the bound of path kBf16 (w_abs_sum: Σ_j |w_j| of each output's weight row).
int check(const std::vector<float>& y, const std::vector<double>& want,
          const std::vector<double>& abs_sum, int64_t in, const std::string& what,
          const std::vector<double>* w_abs_sum = nullptr, double unit = 1.0,
          bool w_rounds = false) {
  int bad = 0;
  const size_t out = w_abs_sum ? w_abs_sum->size() : 1;
  for (size_t k = 0; k < y.size(); ++k) {
    const double b = w_abs_sum ? bound_bf16(in, abs_sum[k], (*w_abs_sum)[k % out], unit, w_rounds)
                               : bound(in, abs_sum[k]);
    const bool ok = std::isnan(want[k]) ? std::isnan(y[k]) : std::abs(double(y[k]) - want[k]) <= b;
    if (!ok && ++bad <= 3)
      ADD_FAILURE() << what << " element " << k << ": got " << y[k] << " want " << want[k]
                    << " bound " << b;
  }
  return bad;
}

const char* path_name(LinearPath p) {
  switch (p) {
    case LinearPath::kDot:
      return "dot";
    case LinearPath::kBf16:
      return "bf16";
    case LinearPath::kBf16Gemm:
      return "bf16gemm";
    default:
      return "auto";
  }
}

// Whether path p may run a product of n rows on the BF16 GEMM (x rounded to BF16): kBf16 above
// the decode batches, kBf16Gemm from 4 rows (its smallest per-format minimum; a product below a
// format's own minimum keeps the FP32 products, inside the BF16 bound as well).
bool may_round_x(LinearPath p, int64_t n) {
  return (p == LinearPath::kBf16 && n > kLinearBatchInvariantRows) ||
         (p == LinearPath::kBf16Gemm && n >= 4);
}

const LinearVariant* variant(const char* name) {
  for (const LinearVariant& v : linear_variants())
    if (v.name == name) return &v;
  return nullptr;
}

struct Shape {
  int64_t out, in;
  int block_rows = 128, block_cols = 128;
};

TEST(Linear, EveryCpuVariantAndPathMatchesTheReference) {
  const std::vector<Shape> shapes = {
      {1, 1},           {5, 17}, {56, 77},  // in below / not a multiple of 8 and 16
      {576, 300},                           // FP8 scale grid 5 × 3, both edges ragged
      {130, 260},                           // one row and 4 columns into the next block
      {300, 2100},                          // in over one L2 chunk of widened rows
      {50, 70, 16, 24},                     // small blocks: a tail in every segment
      {33, 2048, 3, 5},                     // blocks smaller than a vector
  };
  // 23 = 16 + 4 + 2 + 1 x rows: every register tile height of the BF16 GEMM (8, 4, 2, 1).
  const std::vector<int64_t> ns = {0, 1, 3, 8, 9, 23, 64, 200};
  const DType dtypes[] = {DType::kBF16, DType::kF16, DType::kF32, DType::kF8E4M3, DType::kI8};
  const LinearPath paths[] = {LinearPath::kDot, LinearPath::kAuto, LinearPath::kBf16,
                              LinearPath::kBf16Gemm};
  ThreadPool pool(3);  // more threads than this machine's cores: chunks interleave
  Rng rng(42);
  int case_index = 0;
  for (const Shape& s : shapes)
    for (DType dt : dtypes) {
      const int offset = case_index++ % 4;  // 0..3 bytes off the allocation's alignment
      const TestWeight t = make_weight(rng, dt, s.out, s.in, offset, s.block_rows, s.block_cols);
      const TestWeight a = abs_weight(t);
      ASSERT_TRUE(validate(t.w).ok());
      std::vector<double> w_abs_sum(size_t(s.out));  // Σ_j |w_j| per output: |W| · ones
      ref::linear(a.w, 1, std::vector<float>(size_t(s.in), 1.0f).data(), w_abs_sum.data());
      const double unit = gemm_unit(t);
      for (int64_t n : ns) {
        std::vector<float> x(size_t(n * s.in)), xa(x.size());
        for (size_t k = 0; k < x.size(); ++k) xa[k] = std::abs(x[k] = float(rng.normal()));
        std::vector<double> want(size_t(n * s.out)), abs_sum(want.size());
        ref::linear(t.w, n, x.data(), want.data());
        ref::linear(a.w, n, xa.data(), abs_sum.data());
        if (n > 0) {
          int nonzero = 0;
          for (double v : want) nonzero += v != 0;
          ASSERT_GT(nonzero, 0) << "degenerate case";
        }
        const std::string shape = std::string(dtype_name(dt)) + " out " + std::to_string(s.out) +
                                  " in " + std::to_string(s.in) + " n " + std::to_string(n) +
                                  " offset " + std::to_string(offset);
        for (const LinearVariant* v : cpu_linear_variants_here()) {
          for (LinearPath p : paths) {
            std::vector<float> y(want.size(), -12345.0f);
            run_product(*v, t.w, n, x.data(), y.data(), pool, p);
            // Variants without BF16 intermediates keep FP32 products on every path (their
            // FP32 GEMM included): the FP32 bound.
            const bool bf16 = may_round_x(p, n) && v->compute == Intermediates::kBf16;
            check(y, want, abs_sum, s.in, shape + " " + v->name + " " + path_name(p),
                  bf16 ? &w_abs_sum : nullptr, unit, dt == DType::kF32);
          }
        }
        // The public entry: backend "cpu" within the bound, "ref" is the reference rounded once.
        std::vector<float> y(want.size(), -12345.0f);
        ASSERT_TRUE(linear(t.w, n, x.data(), y.data(), pool, "cpu").ok());
        check(y, want, abs_sum, s.in, shape + " linear(cpu)");
        ASSERT_TRUE(linear(t.w, n, x.data(), y.data(), pool, "cpu", DType::kBF16).ok());
        check(y, want, abs_sum, s.in, shape + " linear(cpu, bf16)", n > 16 ? &w_abs_sum : nullptr,
              unit, dt == DType::kF32);
        ASSERT_TRUE(linear(t.w, n, x.data(), y.data(), pool, "ref").ok());
        for (size_t k = 0; k < y.size(); ++k) ASSERT_EQ(y[k], float(want[k])) << shape;
      }
    }
}

// Decode batches: a row of x gets bit for bit the same output alone as in a batch of up to 16
// rows (the engine's greedy output must not depend on what else is running). Above 16 rows, FP8
// and F16 weights are widened once per chunk (w·s rounds instead of x·s), which may differ.
TEST(Linear, ARowOfXGetsTheSameOutputAloneAndInABatch) {
  ThreadPool pool(3);
  Rng rng(11);
  for (DType dt : {DType::kF8E4M3, DType::kBF16, DType::kI8})
    for (auto [out, in] : {std::pair<int64_t, int64_t>{300, 2100}, {130, 260}}) {
      const TestWeight t = make_weight(rng, dt, out, in, 1);
      for (const LinearVariant* v : cpu_linear_variants_here()) {
        for (int64_t n : {2, 5, 16}) {
          std::vector<float> x(size_t(n * in)), y(size_t(n * out)), one(static_cast<size_t>(out));
          for (auto& e : x) e = float(rng.normal());
          run_product(*v, t.w, n, x.data(), y.data(), pool, LinearPath::kAuto);
          for (int64_t i = 0; i < n; ++i) {
            run_product(*v, t.w, 1, x.data() + i * in, one.data(), pool, LinearPath::kAuto);
            for (int64_t o = 0; o < out; ++o)
              ASSERT_EQ(y[size_t(i * out + o)], one[size_t(o)])
                  << v->name << " " << dtype_name(dt) << " out " << out << " n " << n << " row "
                  << i << " output " << o;
          }
        }
      }
    }
}

// Path kBf16: decode batches (n ≤ 16) keep the FP32 products bit for bit in every variant. Above
// 16 rows the BF16 GEMM is really taken where the CPU has it (x rounded: outputs differ from the
// FP32 products), the FP32 GEMM in linear.cpu.avx2, and a row's output still does not depend on
// the other rows of the batch.
TEST(Linear, Bf16PathKeepsDecodeBatchesAndRowsIndependent) {
  ThreadPool pool(3);
  Rng rng(13);
  // in 320: whole 16-pair steps, which linear.cpu.amx runs on the tile unit.
  for (DType dt : {DType::kF8E4M3, DType::kBF16, DType::kF32})
    for (auto [out, in] : {std::pair<int64_t, int64_t>{300, 2100}, {37, 131}, {48, 320}}) {
      const TestWeight t = make_weight(rng, dt, out, in, 3);
      std::vector<float> x(size_t(45 * in));
      for (auto& e : x) e = float(rng.normal());
      const std::string what = std::string(dtype_name(dt)) + " out " + std::to_string(out);
      for (const LinearVariant* v : cpu_linear_variants_here()) {
        for (int64_t n : {1, 4, 16}) {
          std::vector<float> a(size_t(n * out)), b(a.size());
          run_product(*v, t.w, n, x.data(), a.data(), pool, LinearPath::kDot);
          run_product(*v, t.w, n, x.data(), b.data(), pool, LinearPath::kBf16);
          ASSERT_EQ(a, b) << v->name << " " << what << " n " << n;
        }
        std::vector<float> y17(size_t(17 * out)), y45(size_t(45 * out)), f32(y17.size());
        run_product(*v, t.w, 17, x.data(), y17.data(), pool, LinearPath::kBf16);
        run_product(*v, t.w, 45, x.data(), y45.data(), pool, LinearPath::kBf16);
        run_product(*v, t.w, 17, x.data(), f32.data(), pool, LinearPath::kDot);
        for (size_t k = 0; k < y17.size(); ++k) ASSERT_EQ(y17[k], y45[k]) << v->name << " " << what;
        // Above 16 rows the BF16 GEMM, and in linear.cpu.avx2 the FP32 GEMM
        // (linear_gemm_f32_avx2.h: the same products, summed in another order), are really taken.
        if (v->name == "linear.cpu.avx512bf16" || v->name == "linear.cpu.avx2") {
          EXPECT_NE(y17, f32) << v->name << " " << what;
        }
      }
    }
}

// Path kBf16Gemm (a prefill chunk's experts of few tokens): BF16 and FP8 products of 8 rows
// really run on the BF16 GEMM where the CPU has it (outputs differ from the FP32 products), with
// each row's output the same as in a product of more rows (17: path kBf16's GEMM); 2 rows, under
// every format's minimum, keep the FP32 products bit for bit.
TEST(Linear, Bf16GemmPathTakesProductsOfFewRows) {
  ThreadPool pool(3);
  Rng rng(17);
  for (DType dt : {DType::kF8E4M3, DType::kBF16})
    for (auto [out, in] : {std::pair<int64_t, int64_t>{300, 2100}, {37, 131}}) {
      const TestWeight t = make_weight(rng, dt, out, in, 2);
      std::vector<float> x(size_t(17 * in));
      for (auto& e : x) e = float(rng.normal());
      const std::string what = std::string(dtype_name(dt)) + " out " + std::to_string(out);
      for (const LinearVariant* v : cpu_linear_variants_here()) {
        std::vector<float> y8(size_t(8 * out)), f32(y8.size()), y17(size_t(17 * out));
        run_product(*v, t.w, 8, x.data(), y8.data(), pool, LinearPath::kBf16Gemm);
        run_product(*v, t.w, 8, x.data(), f32.data(), pool, LinearPath::kDot);
        run_product(*v, t.w, 17, x.data(), y17.data(), pool, LinearPath::kBf16);
        if (v->name == "linear.cpu.avx512bf16") {
          EXPECT_NE(y8, f32) << what;
          for (size_t k = 0; k < y8.size(); ++k) ASSERT_EQ(y8[k], y17[k]) << what << " " << k;
        }
        std::vector<float> a(size_t(2 * out)), b(a.size());
        run_product(*v, t.w, 2, x.data(), a.data(), pool, LinearPath::kDot);
        run_product(*v, t.w, 2, x.data(), b.data(), pool, LinearPath::kBf16Gemm);
        ASSERT_EQ(a, b) << v->name << " " << what;
      }
    }
}

// linear.cpu.avx512vbmi decodes FP8 by byte-table lookups where linear.cpu.avx512 goes through
// FP16, to the same values, and takes the products in the same order: every output is the same bit
// for bit, every finite code (subnormals included) and NaN bytes in the 64-column steps, their tail
// and the ragged end of a row.
TEST(Linear, VbmiFp8DecodingGivesTheFp16RoutesBits) {
  const LinearVariant* vbmi = variant("linear.cpu.avx512vbmi");
  const LinearVariant* fp16 = variant("linear.cpu.avx512");
  ASSERT_TRUE(vbmi && fp16);
  if (!vbmi->supports(LinearParams{})) GTEST_SKIP() << vbmi->name << " needs AVX-512 VBMI";
  ThreadPool pool(2);
  Rng rng(5);
  const Shape shapes[] = {{300, 2100}, {130, 260}, {33, 2048, 3, 5}, {17, 700, 16, 24}};
  for (const Shape& s : shapes) {
    TestWeight t = make_weight(rng, DType::kF8E4M3, s.out, s.in, 2, s.block_rows, s.block_cols);
    uint8_t* bytes = const_cast<uint8_t*>(t.w.data);
    bytes[1 * s.in + 70] = 0x7F;                   // in a 64-column step
    bytes[4 * s.in + s.in - 1] = 0xFF;             // the last column
    if (s.in > 520) bytes[9 * s.in + 520] = 0x7F;  // a step of the second 512-column segment
    for (int64_t n : {1, 2, 4, 5, 16}) {
      std::vector<float> x(size_t(n * s.in)), a(size_t(n * s.out)), b(a.size());
      for (auto& e : x) e = float(rng.normal());
      run_product(*vbmi, t.w, n, x.data(), a.data(), pool, LinearPath::kAuto);
      run_product(*fp16, t.w, n, x.data(), b.data(), pool, LinearPath::kAuto);
      for (size_t k = 0; k < a.size(); ++k) {
        if (std::isnan(b[k])) {
          ASSERT_TRUE(std::isnan(a[k])) << "out " << s.out << " in " << s.in << " n " << n;
          continue;
        }
        ASSERT_EQ(a[k], b[k]) << "out " << s.out << " in " << s.in << " n " << n << " at " << k;
      }
    }
  }
}

TEST(Linear, ListsTheVariantsBestFirstWithScalarAlwaysThere) {
  const auto& v = linear_variants();
  ASSERT_EQ(v.size(), 9u);
  EXPECT_EQ(v[0].name, "linear.cpu.amx");
  EXPECT_EQ(v[1].name, "linear.cpu.avx512bf16");
  EXPECT_EQ(v[2].name, "linear.cpu.avx512vbmivnni");
  EXPECT_EQ(v[3].name, "linear.cpu.avx512vbmi");
  EXPECT_EQ(v[4].name, "linear.cpu.avx512vnni");
  EXPECT_EQ(v[5].name, "linear.cpu.avx512");
  EXPECT_EQ(v[6].name, "linear.cpu.avx2");
  EXPECT_EQ(v[7].name, "linear.cpu.scalar");
  EXPECT_EQ(v[8].name, "linear.ref.fp64");  // the reference closes the table
  EXPECT_EQ(v[8].backend, "ref");
  EXPECT_TRUE(v[7].supports(LinearParams{}));
  EXPECT_TRUE(v[8].supports(LinearParams{}));
  for (const auto& x : v)
    std::printf("%s: %s\n", x.name.c_str(), x.supports(LinearParams{}) ? "supported" : "skipped");
}

// The AMX variant changes only the BF16 GEMM's whole 16-row blocks of x (path kBf16 above 16
// rows): every FP32 product is linear.cpu.avx512bf16's bit for bit (where the CPU has AMX).
TEST(Linear, AmxVariantKeepsTheFp32Products) {
  const LinearVariant *a = variant("linear.cpu.amx"), *b = variant("linear.cpu.avx512bf16");
  ASSERT_TRUE(a && b);
  if (!a->supports(LinearParams{})) GTEST_SKIP() << "no AMX here";
  ThreadPool pool(3);
  Rng rng(19);
  for (DType dt : {DType::kBF16, DType::kF8E4M3, DType::kF32})
    for (int64_t n : {1, 5, 16, 40}) {
      const TestWeight t = make_weight(rng, dt, 70, 320, 1);
      std::vector<float> x(size_t(n * 320)), ya(size_t(n * 70)), yb(ya.size());
      for (auto& e : x) e = float(rng.normal());
      for (LinearPath p : {LinearPath::kDot, LinearPath::kBf16}) {
        if (p == LinearPath::kBf16 && n > 16) continue;  // the tile unit's own order
        run_product(*a, t.w, n, x.data(), ya.data(), pool, p);
        run_product(*b, t.w, n, x.data(), yb.data(), pool, p);
        ASSERT_EQ(ya, yb) << dtype_name(dt) << " n " << n;
      }
    }
}

// The VNNI variants change only the GGUF block formats: every other dtype gives their base
// variant's outputs bit for bit, on every path.
TEST(Linear, VnniVariantsKeepTheirBaseOutputs) {
  const std::pair<const char*, const char*> pairs[] = {
      {"linear.cpu.avx512vbmivnni", "linear.cpu.avx512vbmi"},
      {"linear.cpu.avx512vnni", "linear.cpu.avx512"}};
  ThreadPool pool(3);
  Rng rng(17);
  for (const auto& [with, base] : pairs) {
    const LinearVariant *a = variant(with), *b = variant(base);
    ASSERT_TRUE(a && b);
    if (!a->supports(LinearParams{})) continue;
    for (DType dt : {DType::kBF16, DType::kF8E4M3, DType::kF32})
      for (int64_t n : {1, 5, 40}) {
        const TestWeight t = make_weight(rng, dt, 70, 300, 1);
        std::vector<float> x(size_t(n * 300)), ya(size_t(n * 70)), yb(ya.size());
        for (auto& e : x) e = float(rng.normal());
        for (LinearPath p : {LinearPath::kDot, LinearPath::kBf16}) {
          run_product(*a, t.w, n, x.data(), ya.data(), pool, p);
          run_product(*b, t.w, n, x.data(), yb.data(), pool, p);
          ASSERT_EQ(ya, yb) << with << " " << dtype_name(dt) << " n " << n;
        }
      }
  }
}

// E4M3 0x7F and 0xFF are NaN: every output that reads one is NaN, whatever the path; the others
// stay finite. One NaN sits in a full vector, one in the ragged tail of the last column block.
TEST(Linear, Fp8NanBytesGiveNanOutputs) {
  Rng rng(7);
  TestWeight t = make_weight(rng, DType::kF8E4M3, 16, 300, 3);
  const_cast<uint8_t*>(t.w.data)[3 * 300 + 5] = 0x7F;
  const_cast<uint8_t*>(t.w.data)[10 * 300 + 290] = 0xFF;
  ThreadPool pool(2);
  for (int64_t n : {1, 40}) {
    std::vector<float> x(size_t(n * 300));
    for (auto& v : x) v = float(rng.normal());
    std::vector<double> want(size_t(n * 16));
    ref::linear(t.w, n, x.data(), want.data());
    for (const LinearVariant* v : cpu_linear_variants_here()) {
      for (LinearPath p : {LinearPath::kDot, LinearPath::kAuto, LinearPath::kBf16}) {
        std::vector<float> y(want.size());
        run_product(*v, t.w, n, x.data(), y.data(), pool, p);
        for (int64_t r = 0; r < n; ++r)
          for (int64_t i = 0; i < 16; ++i) {
            const bool nan_row = i == 3 || i == 10;
            EXPECT_EQ(std::isnan(want[size_t(r * 16 + i)]), nan_row);
            EXPECT_EQ(std::isnan(y[size_t(r * 16 + i)]), nan_row)
                << v->name << " " << path_name(p) << " n " << n << " row " << r << " out " << i;
          }
      }
    }
  }
}

TEST(Linear, RejectsBadArguments) {
  Rng rng(3);
  const TestWeight good = make_weight(rng, DType::kF8E4M3, 4, 8, 1);
  ThreadPool pool(1);
  std::vector<float> x(16), y(8);
  auto expect_bad = [&](const LinearWeight& w, const char* needle, int64_t n = 2,
                        std::string_view backend = "cpu") {
    const Status s = linear(w, n, x.data(), y.data(), pool, backend);
    EXPECT_FALSE(s.ok()) << needle;
    EXPECT_NE(s.to_string().find(needle), std::string::npos) << s.to_string();
  };
  LinearWeight w = good.w;
  w.dtype = DType::kI16;
  expect_bad(w, "dtype");
  w = good.w;
  w.out = 0;
  expect_bad(w, "out >= 1");
  w = good.w;
  w.in = -3;
  expect_bad(w, "in >= 1");
  w = good.w;
  w.data = nullptr;
  expect_bad(w, "data is null");
  w = good.w;
  w.scale_inv = nullptr;
  expect_bad(w, "weight_scale_inv");
  w = good.w;
  w.block_cols = 0;
  expect_bad(w, "block size");
  expect_bad(good.w, "'cuda'", 2, "cuda");
  expect_bad(good.w, "'cuda'", 0, "cuda");  // named even when there is nothing to do
  expect_bad(good.w, "n = -1", -1);
  EXPECT_FALSE(linear(good.w, 2, nullptr, y.data(), pool).ok());
  // n = 0 is a no-op, null pointers included; a BF16 weight needs no scales.
  EXPECT_TRUE(linear(good.w, 0, nullptr, nullptr, pool).ok());
  w = good.w;
  w.dtype = DType::kBF16;
  w.scale_inv = nullptr;
  EXPECT_TRUE(validate(w).ok());
}

}  // namespace
}  // namespace mla
