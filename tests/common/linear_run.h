// How the linear tests and the ops harness run the weight-product variants of the registry
// (kernels/registry.h) one at a time: the CPU ones this machine has, and one product on a given
// variant.
#pragma once

#include <cstdint>
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

}  // namespace mla
