// linear_many: several products in one pass over the pool give, bit for bit, what one linear()
// call each gives, in every CPU variant of the registry (a pass of all jobs against a pass of
// one job each); bad jobs are named.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/rng.h"
#include "core/thread_pool.h"
#include "kernels/linear.h"
#include "kernels/registry.h"
#include "linear_run.h"
#include "linear_test_weight.h"

namespace mla {
namespace {

TEST(LinearMany, EveryJobEqualsItsOwnLinearCall) {
  Rng rng(21);
  // An MoE decode step's shapes in small: experts of one or a few tokens, a shared expert over
  // all, mixed dtypes, an empty job, two above the widening threshold (n > 16) on one x (an
  // expert's gate and up: the BF16 GEMM packs that x once for both).
  const struct {
    DType dt;
    int64_t out, in, n;
  } shapes[] = {{DType::kF8E4M3, 96, 200, 1},   {DType::kF8E4M3, 300, 130, 3},
                {DType::kBF16, 64, 77, 2},      {DType::kF8E4M3, 40, 64, 0},
                {DType::kF16, 33, 48, 5},       {DType::kF32, 17, 31, 1},
                {DType::kF8E4M3, 130, 260, 20}, {DType::kBF16, 70, 260, 20}};
  std::vector<TestWeight> weights;
  std::vector<std::vector<float>> xs;
  for (const auto& s : shapes) {
    weights.push_back(make_weight(rng, s.dt, s.out, s.in, 1));
    std::vector<float> x(size_t(s.n * s.in));
    for (auto& v : x) v = float(rng.normal());
    xs.push_back(std::move(x));
  }
  std::vector<const float*> xp;
  for (const auto& x : xs) xp.push_back(x.data());
  xp.back() = xp[xp.size() - 2];
  ThreadPool pool(3);
  for (const LinearVariant* v : cpu_linear_variants_here()) {
    for (LinearPath path : {LinearPath::kAuto, LinearPath::kBf16, LinearPath::kBf16Gemm}) {
      std::vector<std::vector<float>> many(std::size(shapes)), one(std::size(shapes));
      std::vector<LinearJob> jobs;
      for (size_t j = 0; j < std::size(shapes); ++j) {
        many[j].assign(size_t(shapes[j].n * shapes[j].out), -1.0f);
        one[j].assign(many[j].size(), -2.0f);
        jobs.push_back({&weights[j].w, shapes[j].n, xp[j], many[j].data()});
        if (shapes[j].n > 0)
          run_product(*v, weights[j].w, shapes[j].n, xp[j], one[j].data(), pool, path);
      }
      v->run(LinearParams{jobs, path}, pool);
      for (size_t j = 0; j < std::size(shapes); ++j)
        for (size_t k = 0; k < many[j].size(); ++k)
          ASSERT_EQ(many[j][k], one[j][k]) << v->name << " job " << j << " output " << k;
    }
  }
  // The public entry takes the best variant; "ref" runs each job through ref::linear.
  std::vector<std::vector<float>> got(std::size(shapes)), ref(std::size(shapes));
  std::vector<LinearJob> jobs, ref_jobs;
  for (size_t j = 0; j < std::size(shapes); ++j) {
    got[j].assign(size_t(shapes[j].n * shapes[j].out), 0.0f);
    ref[j] = got[j];
    jobs.push_back({&weights[j].w, shapes[j].n, xp[j], got[j].data()});
    ref_jobs.push_back({&weights[j].w, shapes[j].n, xp[j], ref[j].data()});
  }
  ASSERT_TRUE(linear_many(jobs, pool).ok());
  ASSERT_TRUE(linear_many(ref_jobs, pool, "ref").ok());
  for (size_t j = 0; j < std::size(shapes); ++j) {
    std::vector<float> alone(got[j].size());
    if (shapes[j].n > 0) {
      ASSERT_TRUE(linear(weights[j].w, shapes[j].n, xp[j], alone.data(), pool).ok());
    }
    EXPECT_EQ(got[j], alone) << "job " << j;
    std::vector<float> ref_alone(got[j].size());
    if (shapes[j].n > 0) {
      ASSERT_TRUE(linear(weights[j].w, shapes[j].n, xp[j], ref_alone.data(), pool, "ref").ok());
    }
    EXPECT_EQ(ref[j], ref_alone) << "job " << j;
  }
}

// math kBF16 with batch_rows: up to 16 (a decode batch), each job runs on path kBf16 (its
// few-row products FP32, as linear() with math kBF16 computes them); above 16 (a prefill chunk's
// experts), on path kBf16Gemm of the best variant.
TEST(LinearMany, BatchRowsAboveTheDecodeBatchesPickTheGemmPath) {
  Rng rng(23);
  const TestWeight a = make_weight(rng, DType::kF8E4M3, 130, 260, 1);
  const TestWeight b = make_weight(rng, DType::kBF16, 70, 260, 1);
  const int64_t n = 8;
  std::vector<float> x(size_t(n * 260));
  for (auto& v : x) v = float(rng.normal());
  ThreadPool pool(2);
  const LinearVariant* best = cpu_linear_variants_here().front();
  for (int64_t batch_rows : {0, 16, 17, 512}) {
    std::vector<float> ya(size_t(n * a.w.out)), yb(size_t(n * b.w.out));
    const LinearJob jobs[] = {{&a.w, n, x.data(), ya.data()}, {&b.w, n, x.data(), yb.data()}};
    ASSERT_TRUE(linear_many(jobs, pool, "cpu", DType::kBF16, batch_rows).ok());
    std::vector<float> wa(ya.size()), wb(yb.size());
    if (batch_rows > kLinearBatchInvariantRows) {
      run_product(*best, a.w, n, x.data(), wa.data(), pool, LinearPath::kBf16Gemm);
      run_product(*best, b.w, n, x.data(), wb.data(), pool, LinearPath::kBf16Gemm);
    } else {
      ASSERT_TRUE(linear(a.w, n, x.data(), wa.data(), pool, "cpu", DType::kBF16).ok());
      ASSERT_TRUE(linear(b.w, n, x.data(), wb.data(), pool, "cpu", DType::kBF16).ok());
    }
    EXPECT_EQ(ya, wa) << "batch_rows " << batch_rows;
    EXPECT_EQ(yb, wb) << "batch_rows " << batch_rows;
  }
}

TEST(LinearMany, NamesTheBadJob) {
  Rng rng(4);
  const TestWeight good = make_weight(rng, DType::kBF16, 4, 8, 0);
  ThreadPool pool(1);
  std::vector<float> x(16), y(8);
  LinearWeight bad = good.w;
  bad.in = 0;
  auto error = [&](std::vector<LinearJob> jobs, std::string_view backend = "cpu") {
    const Status s = linear_many(jobs, pool, backend);
    EXPECT_FALSE(s.ok());
    return s.to_string();
  };
  const LinearJob ok{&good.w, 2, x.data(), y.data()};
  EXPECT_NE(error({ok, {nullptr, 1, x.data(), y.data()}}).find("job 1: no weight"),
            std::string::npos);
  EXPECT_NE(error({ok, {&bad, 1, x.data(), y.data()}}).find("in >= 1"), std::string::npos);
  EXPECT_NE(error({{&good.w, -1, x.data(), y.data()}}).find("job 0: n = -1"), std::string::npos);
  EXPECT_NE(error({{&good.w, 1, nullptr, y.data()}}).find("x or y is null"), std::string::npos);
  EXPECT_NE(error({ok}, "cuda").find("'cuda'"), std::string::npos);
  // Nothing to do is fine: no jobs, or jobs of n = 0 with null pointers.
  EXPECT_TRUE(linear_many({}, pool).ok());
  const LinearJob empty{&good.w, 0, nullptr, nullptr};
  EXPECT_TRUE(linear_many(std::span<const LinearJob>(&empty, 1), pool).ok());
}

}  // namespace
}  // namespace mla
