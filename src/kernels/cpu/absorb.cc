// Query absorption and output up-projection for the absorbed path: one small product per head
// (kernels/cpu/small_gemm.h), heads spread over the pool's threads.
#include "kernels/cpu/absorb.h"

#include <cstdint>
#include <cstring>

#include "kernels/cpu/small_gemm.h"

namespace mla::cpu {

void absorb_query(int s_q, int h_q, int d_n, int d_r, int r, const float* q, const float* w_uk,
                  float* q_abs, ThreadPool& pool) {
  const int d_qk = d_n + d_r, d_abs = r + d_r;
  pool.parallel_for(h_q, [&](int64_t h, int) {
    // [s_q × d_n] · [d_n × r], rows strided by h_q heads.
    gemm_xw(s_q, d_n, r, q + h * d_qk, int64_t(h_q) * d_qk, w_uk + h * d_n * r, q_abs + h * d_abs,
            int64_t(h_q) * d_abs);
    for (int s = 0; s < s_q; ++s)
      std::memcpy(q_abs + (int64_t(s) * h_q + h) * d_abs + r,
                  q + (int64_t(s) * h_q + h) * d_qk + d_n, sizeof(float) * d_r);
  });
}

void unabsorb_output(int s_q, int h_q, int d_v, int r, const float* o_lat, const float* w_uv,
                     float* o, ThreadPool& pool) {
  pool.parallel_for(h_q, [&](int64_t h, int) {
    // [s_q × r] · [r × d_v] (W_UV[h] stored [d_v, r], so transposed).
    gemm_xwt(s_q, r, d_v, o_lat + h * r, int64_t(h_q) * r, w_uv + h * d_v * r, o + h * d_v,
             int64_t(h_q) * d_v);
  });
}

}  // namespace mla::cpu
