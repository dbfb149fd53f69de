// The jobs of an MoE layer in linear_many. SwiGLU jobs (LinearJob::up): y = silu(x · Gateᵀ) ⊙
// (x · Upᵀ) made chunk by chunk is, bit for bit, silu_mul of the two products as the same variant
// makes them alone, on every CPU variant and both math paths (decode rows, the tail split of a
// decode pass, the BF16 and int8 GEMMs above 16 rows), for every weight layout the loader makes:
// BF16, F16, F32, block-FP8 with a ragged scale grid, their 16-row repacks, Q8_0 / Q4_K and their
// repacks; the "ref" backend makes it from its FP64 products; mismatched pairs are refused,
// naming the job. Gathered jobs (LinearJob::x_rows: an expert's tokens read where they are) give
// what the same job gives on a gathered copy of x, beside a plain job on the same x. A GEMM job
// cut into blocks of rows of x gives what each block gives as a job of its own.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/ggml_repack.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "kernels/activation.h"
#include "kernels/linear.h"
#include "kernels/registry.h"
#include "linear_ggml_bounds.h"
#include "linear_run.h"
#include "linear_test_weight.h"

namespace mla {
namespace {

// A gate / up pair of one layout, each weight with its own bytes.
struct Pair {
  std::vector<uint8_t> bytes[2], scales[2];
  LinearWeight w[2];
};

Pair float_pair(DType t, int64_t out, int64_t in, bool repack, uint64_t seed) {
  Rng rng(seed);
  Pair p;
  for (int k = 0; k < 2; ++k) {
    TestWeight tw = make_weight(rng, t, out, in, 0, 128, 96);  // FP8: ragged column blocks
    p.bytes[k] = std::move(tw.data);
    p.scales[k] = std::move(tw.scales);
    p.w[k] = tw.w;
    p.w[k].data = p.bytes[k].data();
    if (!p.scales[k].empty()) p.w[k].scale_inv = p.scales[k].data();
    if (!repack) continue;
    std::vector<uint8_t> packed(p.bytes[k].size());
    repack_rows(repacked_dtype(t), p.w[k].data, out, in, packed.data());
    p.bytes[k] = std::move(packed);
    p.w[k].dtype = repacked_dtype(t);
    p.w[k].data = p.bytes[k].data();
  }
  return p;
}

Pair block_pair(DType t, int64_t out, int64_t in, uint64_t seed) {
  Pair p;
  for (int k = 0; k < 2; ++k) {
    test::BlockWeight b = test::make_weight(t, out, in, seed + uint64_t(k));
    const int64_t offset = b.w.data - b.bytes.data();  // the repacks sit at an odd address
    p.bytes[k] = std::move(b.bytes);
    p.w[k] = b.w;
    p.w[k].data = p.bytes[k].data() + offset;
  }
  return p;
}

std::vector<Pair> pairs() {
  std::vector<Pair> out;
  // 144 rows: three 48-row GEMM tiles; 300: ragged chunks and a decode pass's split tail.
  for (DType t : {DType::kBF16, DType::kF16, DType::kF32, DType::kF8E4M3})
    out.push_back(float_pair(t, t == DType::kF8E4M3 ? 300 : 144, 256, false, 7));
  for (DType t : {DType::kBF16, DType::kF8E4M3}) out.push_back(float_pair(t, 144, 256, true, 8));
  for (DType t : {DType::kQ8_0, DType::kQ4_K, DType::kQ8_0R16, DType::kQ4_KR16})
    out.push_back(block_pair(t, 48, 512, 9));
  return out;
}

TEST(LinearSwiglu, EqualsSiluOfTheTwoProductsOnEveryVariant) {
  ThreadPool pool(3);
  for (const Pair& p : pairs()) {
    const LinearWeight &gate = p.w[0], &up = p.w[1];
    ASSERT_TRUE(linear_pair_fits(gate, up)) << dtype_name(gate.dtype);
    const int64_t out = gate.out, in = gate.in;
    for (int64_t n : {1, 3, 20, 40}) {
      std::vector<float> x(size_t(n * in));
      Rng rng{uint64_t(n)};
      for (float& v : x) v = float(rng.normal());
      for (const LinearVariant* v : cpu_linear_variants_here())
        for (LinearPath path : {LinearPath::kAuto, LinearPath::kBf16}) {
          std::vector<float> g(size_t(n * out)), u(g.size()), y(g.size(), -1.0f),
              uy(g.size(), -1.0f), other(g.size(), -1.0f), other_alone(g.size());
          run_product(*v, gate, n, x.data(), g.data(), pool, path);
          run_product(*v, up, n, x.data(), u.data(), pool, path);
          run_product(*v, up, n, x.data(), other_alone.data(), pool, path);
          silu_mul(g.data(), u.data(), n * out);
          // Beside a plain job on the same x (which shares its layout of x).
          const LinearJob jobs[] = {{&gate, n, x.data(), y.data(), &up, uy.data()},
                                    {&up, n, x.data(), other.data()}};
          v->run(LinearParams{jobs, path}, pool);
          const std::string at = std::string(v->name) + " " + std::string(dtype_name(gate.dtype)) +
                                 " n " + std::to_string(n) +
                                 (path == LinearPath::kBf16 ? " bf16" : "");
          ASSERT_EQ(0, std::memcmp(y.data(), g.data(), y.size() * 4)) << at;
          ASSERT_EQ(0, std::memcmp(uy.data(), u.data(), uy.size() * 4)) << at << " (up_y)";
          ASSERT_EQ(0, std::memcmp(other.data(), other_alone.data(), other.size() * 4)) << at;
        }
      // The reference backend: silu_mul of its own two products.
      std::vector<float> g(size_t(n * out)), u(g.size()), y(g.size()), uy(g.size());
      ASSERT_TRUE(linear(gate, n, x.data(), g.data(), pool, "ref").ok());
      ASSERT_TRUE(linear(up, n, x.data(), u.data(), pool, "ref").ok());
      silu_mul(g.data(), u.data(), n * out);
      const LinearJob job{&gate, n, x.data(), y.data(), &up, uy.data()};
      ASSERT_TRUE(linear_many(std::span<const LinearJob>(&job, 1), pool, "ref").ok());
      ASSERT_EQ(y, g) << "ref " << dtype_name(gate.dtype) << " n " << n;
    }
  }
}

TEST(LinearGather, RowsReadInPlaceEqualAGatheredCopy) {
  ThreadPool pool(3);
  for (const Pair& p : pairs()) {
    const LinearWeight &gate = p.w[0], &up = p.w[1];
    const int64_t out = gate.out, in = gate.in, tokens = 45;
    std::vector<float> x(size_t(tokens * in));
    Rng rng{11};
    for (float& v : x) v = float(rng.normal());
    for (int64_t n : {1, 3, 20, 40}) {
      std::vector<int64_t> rows(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) rows[size_t(i)] = (i * 7 + 3) % tokens;  // out of order
      std::vector<float> copy(size_t(n * in));
      for (int64_t i = 0; i < n; ++i)
        std::memcpy(&copy[size_t(i * in)], &x[size_t(rows[size_t(i)] * in)], size_t(in) * 4);
      auto check = [&](const LinearVariant* v, LinearPath path, std::string_view backend) {
        const size_t size = size_t(n * out);
        std::vector<float> want(size), want_u(size), got(size), got_u(size), plain(size, -1.0f),
            plain_want(size), up_got(size), up_want(size);
        // A SwiGLU job and a plain one, each gathered, beside a plain job on the same x's first n
        // rows (the same x pointer, so no layout of x may be shared with the gathered ones).
        const LinearJob gathered[] = {
            {&gate, n, x.data(), got.data(), &up, got_u.data(), rows.data()},
            {&up, n, x.data(), up_got.data(), nullptr, nullptr, rows.data()},
            {&gate, n, x.data(), plain.data()}};
        const LinearJob copied[] = {{&gate, n, copy.data(), want.data(), &up, want_u.data()},
                                    {&up, n, copy.data(), up_want.data()},
                                    {&gate, n, x.data(), plain_want.data()}};
        if (v) {
          v->run(LinearParams{gathered, path}, pool);
          v->run(LinearParams{copied, path}, pool);
        } else {
          ASSERT_TRUE(linear_many(gathered, pool, backend).ok());
          ASSERT_TRUE(linear_many(copied, pool, backend).ok());
        }
        const std::string at = std::string(v ? v->name : backend) + " " +
                               std::string(dtype_name(gate.dtype)) + " n " + std::to_string(n) +
                               (path == LinearPath::kBf16 ? " bf16" : "");
        ASSERT_EQ(0, std::memcmp(got.data(), want.data(), size * 4)) << at;
        ASSERT_EQ(0, std::memcmp(up_got.data(), up_want.data(), size * 4)) << at;
        ASSERT_EQ(0, std::memcmp(plain.data(), plain_want.data(), size * 4)) << at;
      };
      for (const LinearVariant* v : cpu_linear_variants_here())
        for (LinearPath path : {LinearPath::kAuto, LinearPath::kBf16}) check(v, path, "cpu");
      check(nullptr, LinearPath::kAuto, "ref");
    }
  }
}

// A GEMM job over many rows of x runs its x in blocks of rows (the weight chunks pass over one
// block while it stays in cache): each block's outputs are, bit for bit, what the same rows give
// as a job of their own, SwiGLU and gathered jobs included. Rows of 4,096 values make every GEMM
// layout's x row at least 5 KiB (Q8_0: 4,096 codes and 1,024 bytes of scales and sums; BF16
// pairs: 8 KiB), so 2 MiB holds fewer than 410 rows and a block is its minimum of 384: 800 rows
// (more than 1.5 blocks) are cut into 384 + 384 + 32.
TEST(LinearGemmRowBlocks, EachBlockEqualsItsRowsAsAJob) {
  ThreadPool pool(3);
  constexpr int64_t kIn = 4096, kN = 800, kPiece = 384, kTokens = 900;
  std::vector<Pair> all;
  for (DType t : {DType::kBF16, DType::kF8E4M3})
    for (bool repack : {false, true}) all.push_back(float_pair(t, 48, kIn, repack, 12));
  for (DType t : {DType::kQ8_0, DType::kQ4_K, DType::kQ8_0R16, DType::kQ4_KR16})
    all.push_back(block_pair(t, 48, kIn, 13));
  std::vector<float> x(size_t(kTokens * kIn));
  Rng rng{14};
  for (float& v : x) v = float(rng.normal());
  std::vector<int64_t> rows(static_cast<size_t>(kN));
  for (int64_t i = 0; i < kN; ++i) rows[size_t(i)] = (i * 7 + 3) % kTokens;
  for (const Pair& p : all) {
    const LinearWeight &gate = p.w[0], &up = p.w[1];
    const int64_t out = gate.out, size = kN * out;
    for (const LinearVariant* v : cpu_linear_variants_here()) {
      // Whole: a SwiGLU job and a gathered plain one; pieces: the same rows kPiece at a time.
      std::vector<float> y(size_t(size), -1.0f), uy(y), g(y), y1(size_t(size), -2.0f), uy1(y1),
          g1(y1);
      const LinearJob whole[] = {{&gate, kN, x.data(), y.data(), &up, uy.data()},
                                 {&up, kN, x.data(), g.data(), nullptr, nullptr, rows.data()}};
      v->run(LinearParams{whole, LinearPath::kBf16}, pool);
      for (int64_t i0 = 0; i0 < kN; i0 += kPiece) {
        const int64_t n = std::min(kPiece, kN - i0);
        const LinearJob piece[] = {
            {&gate, n, x.data() + i0 * kIn, y1.data() + i0 * out, &up, uy1.data() + i0 * out},
            {&up, n, x.data(), g1.data() + i0 * out, nullptr, nullptr, rows.data() + i0}};
        v->run(LinearParams{piece, LinearPath::kBf16}, pool);
      }
      const std::string at = std::string(v->name) + " " + std::string(dtype_name(gate.dtype));
      ASSERT_EQ(0, std::memcmp(y.data(), y1.data(), size_t(size) * 4)) << at;
      ASSERT_EQ(0, std::memcmp(uy.data(), uy1.data(), size_t(size) * 4)) << at << " (up_y)";
      ASSERT_EQ(0, std::memcmp(g.data(), g1.data(), size_t(size) * 4)) << at << " (gathered)";
    }
  }
}

TEST(LinearSwiglu, RefusesPairsThatDoNotMatch) {
  ThreadPool pool(1);
  const Pair bf16 = float_pair(DType::kBF16, 32, 64, false, 1);
  const Pair fp8 = float_pair(DType::kF8E4M3, 32, 64, false, 2);
  std::vector<float> x(64), y(32), uy(32);
  auto error = [&](const LinearWeight& gate, const LinearWeight& up, float* up_y) {
    const LinearJob jobs[] = {{&gate, 1, x.data(), y.data()},
                              {&gate, 1, x.data(), y.data(), &up, up_y}};
    const Status s = linear_many(jobs, pool);
    EXPECT_FALSE(s.ok());
    return s.to_string();
  };
  EXPECT_NE(error(bf16.w[0], fp8.w[1], uy.data()).find("job 1: the up weight (F8_E4M3"),
            std::string::npos);
  LinearWeight narrow = bf16.w[1];
  narrow.out = 16;
  EXPECT_NE(error(bf16.w[0], narrow, uy.data()).find("[16, 64]) differs from the gate's"),
            std::string::npos);
  LinearWeight grid = fp8.w[1];
  grid.block_cols = 32;
  EXPECT_NE(error(fp8.w[0], grid, uy.data()).find("scale grid"), std::string::npos);
  EXPECT_NE(error(bf16.w[0], bf16.w[1], nullptr).find("job 1: up_y is null"), std::string::npos);
  LinearWeight broken = bf16.w[1];
  broken.data = nullptr;
  EXPECT_NE(error(bf16.w[0], broken, uy.data()).find("data is null"), std::string::npos);
}

}  // namespace
}  // namespace mla
