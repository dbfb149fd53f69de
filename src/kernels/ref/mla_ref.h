// The reference (oracle) for the MLA ops: plain loops in FP64 over the same stored inputs the fast
// kernels read. Independent of kernels/cpu by construction: it shares only the parameter structs.
// Slow on purpose; never call it on a hot path.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/mla_params.h"
#include "kernels/rope_params.h"

namespace mla::ref {

// ---- RoPE / YaRN (DeepSeek's use of YaRN: docs/kernels/rope.md) ----
// inv_freq[i] for i in [0, dim/2): theta^(-2i/dim), blended with theta^(-2i/dim)/factor by the
// YaRN ramp when scaling.yarn, or divided by longrope_ext[i] for LongRoPE.
std::vector<double> rope_inv_freq(const RopeConfig& cfg);
// corr_dim(n) = dim * ln(L0 / (2 pi n)) / (2 ln theta): the (fractional) pair index whose
// wavelength 2 pi theta^(2i/dim) fits n times into L0 positions.
double yarn_correction_dim(int dim, double theta, double original_max_position, double n_rotations);
// Where the YaRN ramp starts and ends (pair indices):
// low = max(floor(corr_dim(beta_fast)), 0), high = min(ceil(corr_dim(beta_slow)), dim - 1),
// high += 0.001 when they are equal.
struct YarnRampRange {
  double low = 0, high = 0;
};
YarnRampRange yarn_ramp_range(const RopeConfig& cfg);
// g(s, mu) = 1 if s <= 1 else 0.1 * mu * ln(s) + 1.
double yarn_get_mscale(double factor, double mu);
// The factor cos/sin are multiplied by: g(s, mscale) / g(s, mscale_all_dim) for YaRN,
// longrope_attention for LongRoPE, else 1.0.
double rope_attention_factor(const RopeConfig& cfg);
// d_qk^-0.5 * m^2 with m = g(s, mscale_all_dim) when YaRN has mscale_all_dim != 0, else m = 1.
double mla_softmax_scale(int d_qk, const RopeScaling& scaling);
// Rotates x [n_tokens, n_heads, cfg.dim] in place (FP64 arithmetic, result stored FP32);
// token t is at absolute position positions[t].
void rope_apply(const RopeConfig& cfg, const int64_t* positions, int n_tokens, int n_heads,
                float* x);
// The same on rows with a stride, as the table kernel takes them (kernels/rope_table.h): the
// cfg.dim values at x + (t·n_heads + h)·row_stride + offset; cos / sin are computed here in FP64
// from cfg (not read from a table), so a check against it covers the table too.
//   x [n_tokens, n_heads, row_stride] fp32
void rope_rotate(const RopeConfig& cfg, const int64_t* positions, int n_tokens, int n_heads,
                 int64_t row_stride, int64_t offset, float* x);

// ---- attention ----
// Absorbed decode over the paged cache (the FlashMLA contract, docs/kernels/mla_decode.md).
void mla_decode(const MlaDecodeParams& p);
// Decompressed attention for one chunk: up-projects K and V per head in FP64.
void mla_prefill(const MlaPrefillParams& p);

// q_lat[s,h,:] = W_UK[h]^T q_nope[s,h,:] in FP64, written as [s_q, h_q, r + d_r] with the rotated
// q_pe copied after it: the absorbed query mla_decode takes.
//   q    [s_q, h_q, d_n + d_r] fp32;  w_uk [h_q, d_n, r] fp32;  q_abs [s_q, h_q, r + d_r] fp64
void absorb_query(int s_q, int h_q, int d_n, int d_r, int r, const float* q, const float* w_uk,
                  double* q_abs);
// o[s,h,:] = W_UV[h] · o_lat[s,h,:] in FP64.
//   o_lat [s_q, h_q, r];  w_uv [h_q, d_v, r];  o [s_q, h_q, d_v]
void unabsorb_output(int s_q, int h_q, int d_v, int r, const double* o_lat, const float* w_uv,
                     double* o);

}  // namespace mla::ref
