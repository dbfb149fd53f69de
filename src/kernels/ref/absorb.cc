// Reference weight absorption for MLA: the query into the latent space (W_UK^T q_nope) and the
// latent output back to v_head_dim (W_UV o_lat), in FP64 (docs/MODELS.md §Absorbed attention).
#include <cstdint>

#include "kernels/ref/mla_ref.h"

namespace mla::ref {

void absorb_query(int s_q, int h_q, int d_n, int d_r, int r, const float* q, const float* w_uk,
                  double* q_abs) {
  for (int s = 0; s < s_q; ++s) {
    for (int h = 0; h < h_q; ++h) {
      const float* qh = q + (int64_t(s) * h_q + h) * (d_n + d_r);  // [d_n + d_r]
      const float* w = w_uk + int64_t(h) * d_n * r;                // [d_n, r]
      double* out = q_abs + (int64_t(s) * h_q + h) * (r + d_r);    // [r + d_r]
      // q_lat[k] = sum_j W_UK[j, k] q_nope[j]: column k of W_UK against q_nope.
      for (int k = 0; k < r; ++k) {
        double sum = 0.0;
        for (int j = 0; j < d_n; ++j) sum += double(w[int64_t(j) * r + k]) * double(qh[j]);
        out[k] = sum;
      }
      // The rotated q_pe meets k_pe unchanged in both forms.
      for (int i = 0; i < d_r; ++i) out[r + i] = qh[d_n + i];
    }
  }
}

void unabsorb_output(int s_q, int h_q, int d_v, int r, const double* o_lat, const float* w_uv,
                     double* o) {
  for (int s = 0; s < s_q; ++s) {
    for (int h = 0; h < h_q; ++h) {
      const double* lat = o_lat + (int64_t(s) * h_q + h) * r;  // [r]
      const float* w = w_uv + int64_t(h) * d_v * r;            // [d_v, r]
      double* out = o + (int64_t(s) * h_q + h) * d_v;          // [d_v]
      for (int j = 0; j < d_v; ++j) {
        double sum = 0.0;
        for (int k = 0; k < r; ++k) sum += double(w[int64_t(j) * r + k]) * lat[k];
        out[j] = sum;
      }
    }
  }
}

}  // namespace mla::ref
