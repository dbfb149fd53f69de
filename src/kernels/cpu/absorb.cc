// Query absorption and output up-projection for the absorbed path, one OpenBLAS GEMM per head.
#include "kernels/cpu/absorb.h"

#include <cblas.h>

#include <cstdint>
#include <cstring>

namespace mla::cpu {

void absorb_query(int s_q, int h_q, int d_n, int d_r, int r, const float* q, const float* w_uk,
                  float* q_abs) {
  const int d_qk = d_n + d_r, d_abs = r + d_r;
  for (int h = 0; h < h_q; ++h) {
    // [s_q × d_n] · [d_n × r], rows strided by h_q heads.
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s_q, r, d_n, 1.0f, q + int64_t(h) * d_qk,
                h_q * d_qk, w_uk + int64_t(h) * d_n * r, r, 0.0f, q_abs + int64_t(h) * d_abs,
                h_q * d_abs);
    for (int s = 0; s < s_q; ++s)
      std::memcpy(q_abs + (int64_t(s) * h_q + h) * d_abs + r,
                  q + (int64_t(s) * h_q + h) * d_qk + d_n, sizeof(float) * d_r);
  }
}

void unabsorb_output(int s_q, int h_q, int d_v, int r, const float* o_lat, const float* w_uv,
                     float* o) {
  for (int h = 0; h < h_q; ++h)
    // [s_q × r] · [r × d_v] (W_UV[h] stored [d_v, r], so transposed).
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s_q, d_v, r, 1.0f, o_lat + int64_t(h) * r,
                h_q * r, w_uv + int64_t(h) * d_v * r, r, 0.0f, o + int64_t(h) * d_v, h_q * d_v);
}

}  // namespace mla::cpu
