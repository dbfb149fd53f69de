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
#include "kernels/cpu/linear_cpu.h"
#include "kernels/linear.h"
#include "kernels/ref/linear_ref.h"
#include "linear_test_weight.h"

namespace mla {
namespace {

// |W|: the sign bit of every element cleared (scales are positive already).
TestWeight abs_weight(const TestWeight& t) {
  TestWeight a = t;
  const size_t off = size_t(t.w.data - t.data.data());
  a.w.data = a.data.data() + off;
  if (t.w.scale_inv) a.w.scale_inv = a.scales.data() + (t.w.scale_inv - t.scales.data());
  const int eb = elem_bytes(t.w.dtype);
  for (int64_t k = 0; k < t.w.out * t.w.in; ++k) {
    uint8_t& b = a.data[off + size_t(k) * eb + eb - 1];
    b = t.w.dtype == DType::kI8 ? uint8_t(std::abs(int(int8_t(b)))) : uint8_t(b & 0x7F);
  }
  return a;
}

// The error bound per output y_i = Σ_j x_j·w_j (u = 2^-24): widening is exact except the block
// scale of FP8 and int8 (code · scale, or x · scale on the decode path), which rounds once; a
// product is exact under FMA or rounds once (u) in the scalar variant; any summation tree of `in`
// terms (lane partials, horizontal sums, SGEMM's blocking and its β = 1 accumulation over column
// panels) adds at most γ_in = in·u / (1 − in·u) of Σ|x_j·w_j|. Together: |ŷ − y| ≤ γ_(in+2) · Σ_j
// |x_j·w_j|, plus (in + 2)·2^-149 for products that underflow.
double bound(int64_t in, double abs_sum) {
  const double u = std::ldexp(1.0, -24), k = double(in + 2);
  return k * u / (1 - k * u) * abs_sum + k * std::ldexp(1.0, -149);
}

// Path kBf16 on a variant with the BF16 GEMM, n > 16 (linear_gemm_bf16.h): x_j rounds to BF16
// (RNE, relative u_b = 2^-8); BF16 weights are exact and FP8 ones are held as their exact value
// · 2^-8 in BF16, so every pair product is exact in FP32. Each lane adds its products one at a
// time (one rounding each: ≤ in), and FP8 adds two roundings per scale block (s · partial, then
// the block sum: ≤ 2 · (in / 2 + 1)), so m = 2·in + 4 roundings bound any term's path:
//   |ŷ − y| ≤ (u_b + γ_m · (1 + u_b)) · Σ_j |x_j·w_j| + flush terms.
// The BF16 units treat values below 2^-126 as zero: an input x_j that small moves y by at most
// 2^-126·|w_j| (2^-126·Σ_j|w_j| in all), and each of the m sums that underflows moves it by at
// most 2^-126 in the accumulator's unit, which FP8 scales by s·2^8 (`unit`).
// F32 weights (`w_rounds`) are rounded to BF16 in the panel as well (relative u_b each): the
// products are then off by (2·u_b + u_b²)·|x·w| before the sums. (Their draws here are normal
// values, none below 2^-126, so none flushes to zero.)
double bound_bf16(int64_t in, double abs_sum, double w_abs_sum, double unit,
                  bool w_rounds = false) {
  const double u = std::ldexp(1.0, -24), ub = std::ldexp(1.0, -8), m = double(2 * in + 4);
  const double uw = w_rounds ? ub : 0.0;
  const double gamma = m * u / (1 - m * u);
  return (ub + uw + ub * uw + gamma * (1 + ub) * (1 + uw)) * abs_sum +
         std::ldexp(1.0, -126) * (w_abs_sum + m * unit);
}

// The largest FP8 scale · 2^8 of a weight (the unit of its partial sums in the GEMM), 1 otherwise.
double gemm_unit(const TestWeight& t) {
  if (t.w.dtype != DType::kF8E4M3) return 1.0;
  double m = 1.0;
  for (size_t k = size_t(t.w.scale_inv - t.scales.data()); k + 4 <= t.scales.size(); k += 4) {
    float s;
    std::memcpy(&s, t.scales.data() + k, 4);
    m = std::max(m, 256.0 * s);
  }
  return m;
}

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

const char* path_name(cpu::LinearPath p) {
  return p == cpu::LinearPath::kDot ? "dot" : (p == cpu::LinearPath::kBf16 ? "bf16" : "auto");
}

const cpu::LinearCpuVariant* variant(const char* name) {
  for (const cpu::LinearCpuVariant& v : cpu::linear_cpu_variants())
    if (std::string(v.name) == name) return &v;
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
  const cpu::LinearPath paths[] = {cpu::LinearPath::kDot, cpu::LinearPath::kAuto,
                                   cpu::LinearPath::kBf16};
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
        for (const cpu::LinearCpuVariant& v : cpu::linear_cpu_variants()) {
          if (!v.supported()) continue;
          for (cpu::LinearPath p : paths) {
            std::vector<float> y(want.size(), -12345.0f);
            v.run(t.w, n, x.data(), y.data(), pool, p);
            const bool bf16 = p == cpu::LinearPath::kBf16 && n > 16;
            check(y, want, abs_sum, s.in, shape + " " + v.name + " " + path_name(p),
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
      for (const cpu::LinearCpuVariant& v : cpu::linear_cpu_variants()) {
        if (!v.supported()) continue;
        for (int64_t n : {2, 5, 16}) {
          std::vector<float> x(size_t(n * in)), y(size_t(n * out)), one(static_cast<size_t>(out));
          for (auto& e : x) e = float(rng.normal());
          v.run(t.w, n, x.data(), y.data(), pool, cpu::LinearPath::kAuto);
          for (int64_t i = 0; i < n; ++i) {
            v.run(t.w, 1, x.data() + i * in, one.data(), pool, cpu::LinearPath::kAuto);
            for (int64_t o = 0; o < out; ++o)
              ASSERT_EQ(y[size_t(i * out + o)], one[size_t(o)])
                  << v.name << " " << dtype_name(dt) << " out " << out << " n " << n << " row " << i
                  << " output " << o;
          }
        }
      }
    }
}

// Path kBf16: decode batches (n ≤ 16) keep the FP32 products bit for bit in every variant. Above
// 16 rows the BF16 GEMM is really taken where the CPU has it (x rounded: outputs differ from the
// FP32 products), and a row's output still does not depend on the other rows of the batch.
TEST(Linear, Bf16PathKeepsDecodeBatchesAndRowsIndependent) {
  ThreadPool pool(3);
  Rng rng(13);
  for (DType dt : {DType::kF8E4M3, DType::kBF16, DType::kF32})
    for (auto [out, in] : {std::pair<int64_t, int64_t>{300, 2100}, {37, 131}}) {
      const TestWeight t = make_weight(rng, dt, out, in, 3);
      std::vector<float> x(size_t(45 * in));
      for (auto& e : x) e = float(rng.normal());
      const std::string what = std::string(dtype_name(dt)) + " out " + std::to_string(out);
      for (const cpu::LinearCpuVariant& v : cpu::linear_cpu_variants()) {
        if (!v.supported()) continue;
        for (int64_t n : {1, 4, 16}) {
          std::vector<float> a(size_t(n * out)), b(a.size());
          v.run(t.w, n, x.data(), a.data(), pool, cpu::LinearPath::kDot);
          v.run(t.w, n, x.data(), b.data(), pool, cpu::LinearPath::kBf16);
          ASSERT_EQ(a, b) << v.name << " " << what << " n " << n;
        }
        std::vector<float> y17(size_t(17 * out)), y45(size_t(45 * out)), f32(y17.size());
        v.run(t.w, 17, x.data(), y17.data(), pool, cpu::LinearPath::kBf16);
        v.run(t.w, 45, x.data(), y45.data(), pool, cpu::LinearPath::kBf16);
        v.run(t.w, 17, x.data(), f32.data(), pool, cpu::LinearPath::kDot);
        for (size_t k = 0; k < y17.size(); ++k) ASSERT_EQ(y17[k], y45[k]) << v.name << " " << what;
        if (std::string(v.name) == "linear.cpu.avx512bf16") {
          EXPECT_NE(y17, f32) << what;
        }
      }
    }
}

// linear.cpu.avx512vbmi decodes FP8 by byte-table lookups where linear.cpu.avx512 goes through
// FP16, to the same values, and takes the products in the same order: every output is the same bit
// for bit, every finite code (subnormals included) and NaN bytes in the 64-column steps, their tail
// and the ragged end of a row.
TEST(Linear, VbmiFp8DecodingGivesTheFp16RoutesBits) {
  const cpu::LinearCpuVariant* vbmi = variant("linear.cpu.avx512vbmi");
  const cpu::LinearCpuVariant* fp16 = variant("linear.cpu.avx512");
  ASSERT_TRUE(vbmi && fp16);
  if (!vbmi->supported()) GTEST_SKIP() << vbmi->name << " needs AVX-512 VBMI";
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
      vbmi->run(t.w, n, x.data(), a.data(), pool, cpu::LinearPath::kAuto);
      fp16->run(t.w, n, x.data(), b.data(), pool, cpu::LinearPath::kAuto);
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
  const auto v = cpu::linear_cpu_variants();
  ASSERT_EQ(v.size(), 7u);
  EXPECT_STREQ(v[0].name, "linear.cpu.avx512bf16");
  EXPECT_STREQ(v[1].name, "linear.cpu.avx512vbmivnni");
  EXPECT_STREQ(v[2].name, "linear.cpu.avx512vbmi");
  EXPECT_STREQ(v[3].name, "linear.cpu.avx512vnni");
  EXPECT_STREQ(v[4].name, "linear.cpu.avx512");
  EXPECT_STREQ(v[5].name, "linear.cpu.avx2");
  EXPECT_STREQ(v[6].name, "linear.cpu.scalar");
  EXPECT_TRUE(v[6].supported());
  for (const auto& x : v) std::printf("%s: %s\n", x.name, x.supported() ? "supported" : "skipped");
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
    const cpu::LinearCpuVariant *a = variant(with), *b = variant(base);
    ASSERT_TRUE(a && b);
    if (!a->supported()) continue;
    for (DType dt : {DType::kBF16, DType::kF8E4M3, DType::kF32})
      for (int64_t n : {1, 5, 40}) {
        const TestWeight t = make_weight(rng, dt, 70, 300, 1);
        std::vector<float> x(size_t(n * 300)), ya(size_t(n * 70)), yb(ya.size());
        for (auto& e : x) e = float(rng.normal());
        for (cpu::LinearPath p : {cpu::LinearPath::kDot, cpu::LinearPath::kBf16}) {
          a->run(t.w, n, x.data(), ya.data(), pool, p);
          b->run(t.w, n, x.data(), yb.data(), pool, p);
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
    for (const cpu::LinearCpuVariant& v : cpu::linear_cpu_variants()) {
      if (!v.supported()) continue;
      for (cpu::LinearPath p :
           {cpu::LinearPath::kDot, cpu::LinearPath::kAuto, cpu::LinearPath::kBf16}) {
        std::vector<float> y(want.size());
        v.run(t.w, n, x.data(), y.data(), pool, p);
        for (int64_t r = 0; r < n; ++r)
          for (int64_t i = 0; i < 16; ++i) {
            const bool nan_row = i == 3 || i == 10;
            EXPECT_EQ(std::isnan(want[size_t(r * 16 + i)]), nan_row);
            EXPECT_EQ(std::isnan(y[size_t(r * 16 + i)]), nan_row)
                << v.name << " " << path_name(p) << " n " << n << " row " << r << " out " << i;
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
