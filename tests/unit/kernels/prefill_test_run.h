// The shape of a decompressed-prefill test case and one causal run of it on the best "cpu"
// variant, for the tests that hold the low-precision tiles to their arithmetic.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/mla_problem.h"
#include "kernels/registry.h"

namespace mla::test {

// h heads, head dims d_n | d_r and d_v, latent r, s_q queries after `prior` cached tokens.
struct PrefillShape {
  int h = 3, d_n = 32, d_r = 16, d_v = 32, r = 64, s_q = 40, prior = 70, page = 16;
};

// The softmax scale the runs use: 1 / sqrt(d_n + d_r).
inline float prefill_softmax_scale(const PrefillShape& k) {
  return float(1.0 / std::sqrt(double(k.d_n + k.d_r)));
}

// out [s_q, h, d_v] of the last s_q tokens of `cache` (q [s_q, h, d_n + d_r], w_uk [h, d_n, r],
// w_uv [h, d_v, r]) with MlaPrefillParams::attention_dtype `math`, on 2 threads.
inline std::vector<float> run_cpu_prefill(const PrefillShape& k, const PagedCache& cache,
                                          const std::vector<float>& q,
                                          const std::vector<float>& w_uk,
                                          const std::vector<float>& w_uv, DType math) {
  std::vector<float> out(size_t(k.s_q) * k.h * k.d_v), lse(size_t(k.h) * k.s_q);
  MlaPrefillParams p;
  p.s_q = k.s_q;
  p.h_q = k.h;
  p.d_n = k.d_n;
  p.d_r = k.d_r;
  p.d_v = k.d_v;
  p.r = k.r;
  p.q = q.data();
  p.cache = cache_view(cache);
  p.w_uk = w_uk.data();
  p.w_uv = w_uv.data();
  p.softmax_scale = prefill_softmax_scale(k);
  p.causal = true;
  p.attention_dtype = math;
  p.out = out.data();
  p.lse = lse.data();
  ThreadPool pool(2);
  const MlaPrefillVariant* v = select_variant(p, "cpu").value();
  EXPECT_TRUE(run_variant(*v, p, pool).ok());
  return out;
}

}  // namespace mla::test
