// The two small GEMMs around the absorbed decode, on the CPU (FP32, threads over heads):
// folding W_UK into the query before attention and W_UV into the output after it.
#pragma once

#include "core/thread_pool.h"

namespace mla::cpu {

// q_abs[s,h,0:r] = W_UK[h]ᵀ · q_nope[s,h];  q_abs[s,h,r:r+d_r] = q_pe[s,h] (already rotated).
//   q [s_q, h_q, d_n + d_r];  w_uk [h_q, d_n, r];  q_abs [s_q, h_q, r + d_r]   all fp32
void absorb_query(int s_q, int h_q, int d_n, int d_r, int r, const float* q, const float* w_uk,
                  float* q_abs, ThreadPool& pool);

// o[s,h,:] = W_UV[h] · o_lat[s,h,:].
//   o_lat [s_q, h_q, r];  w_uv [h_q, d_v, r];  o [s_q, h_q, d_v]   all fp32
void unabsorb_output(int s_q, int h_q, int d_v, int r, const float* o_lat, const float* w_uv,
                     float* o, ThreadPool& pool);

}  // namespace mla::cpu
