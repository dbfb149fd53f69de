// How the linear tests and the ops harness run the weight-product variants of the registry
// (kernels/registry.h) one at a time: the CPU ones this machine has, and one product on a given
// variant.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/linear.h"
#include "kernels/registry.h"

namespace mla {

// The CPU linear variants of the registry this machine runs, best first.
inline std::vector<const LinearVariant*> cpu_linear_variants_here() {
  std::vector<const LinearVariant*> out;
  for (const LinearVariant& v : linear_variants())
    if (v.backend == "cpu" && v.supports(LinearParams{})) out.push_back(&v);
  return out;
}

// y [n, out] = x [n, in] · W_realᵀ on variant v: a pass with one job (w validated).
inline void run_product(const LinearVariant& v, const LinearWeight& w, int64_t n, const float* x,
                        float* y, ThreadPool& pool, LinearPath path) {
  const LinearJob job{&w, n, x, y};
  v.run(LinearParams{{&job, 1}, path}, pool);
}

// linear_many over two weights (each [*, in]) gives each job what linear() gives it, on both
// math paths, at decode and prefill row counts. Returns a description of the first difference,
// or "" (gtest-free: the callers assert on it).
inline std::string linear_many_difference(const LinearWeight& a, const LinearWeight& b, int64_t in,
                                          ThreadPool& pool) {
  for (int64_t n : {1, 4, 20}) {
    std::vector<float> x(size_t(n * in));
    for (size_t k = 0; k < x.size(); ++k) x[k] = float(int64_t(k * 7919 % 2003) - 1001) / 512.0f;
    std::vector<float> ya(size_t(n * a.out)), yb(size_t(n * b.out)), ma(ya.size()), mb(yb.size());
    for (DType math : {DType::kF32, DType::kBF16}) {
      if (!linear(a, n, x.data(), ya.data(), pool, "cpu", math).ok() ||
          !linear(b, n, x.data(), yb.data(), pool, "cpu", math).ok())
        return "linear failed";
      const LinearJob jobs[] = {{&a, n, x.data(), ma.data()}, {&b, n, x.data(), mb.data()}};
      if (!linear_many(jobs, pool, "cpu", math).ok()) return "linear_many failed";
      if (ya != ma || yb != mb)
        return std::string(ya != ma ? dtype_name(a.dtype) : dtype_name(b.dtype)) + " n " +
               std::to_string(n) + (math == DType::kF32 ? " f32" : " bf16");
    }
  }
  return "";
}

}  // namespace mla
