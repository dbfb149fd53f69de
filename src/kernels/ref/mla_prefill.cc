// Reference decompressed MLA attention for one sequence's chunk: up-projects K and V of every head
// from the cached latent in FP64, then a plain softmax. The naive form of docs/MODELS.md
// §Attention.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/check.h"
#include "core/dtype.h"
#include "core/kv_format.h"
#include "kernels/ref/mla_ref.h"

namespace mla::ref {
namespace {

// Element i of a BF16 or F32 array, widened exactly to FP64.
double load(DType t, const void* base, int64_t i) {
  return t == DType::kBF16 ? double(bf16_to_f32(static_cast<const uint16_t*>(base)[i]))
                           : double(static_cast<const float*>(base)[i]);
}

}  // namespace

void mla_prefill(const MlaPrefillParams& p) {
  const bool plain = p.cache.dtype == DType::kBF16 || p.cache.dtype == DType::kF32;
  MLA_CHECK(plain || kv_cache_dtype_of(p.cache.dtype).has_value(),
            "mla_prefill ref reads a bf16, f32 or quantised kv_cache, got {}",
            dtype_name(p.cache.dtype));
  const int64_t row_bytes = kv_row_bytes(p);
  const int d_qk = p.d_n + p.d_r;  // query row width
  const int d_row = p.r + p.d_r;   // cache row width: [c (r) | k_pe (d_r)]
  const double scale = p.softmax_scale;
  const double kInf = std::numeric_limits<double>::infinity();

  // Gather the s_kv cached rows in FP64. Every key any query can see lies below s_kv, so slots past
  // it and table entries past ceil(s_kv / page_size) are never touched.
  std::vector<double> cache(int64_t(p.s_kv()) * d_row);  // [s_kv, r + d_r]
  for (int t = 0; t < p.s_kv(); ++t) {
    const int32_t block = p.cache.block_table[t / p.cache.page_size];
    MLA_CHECK(block >= 0 && block < p.cache.num_blocks,
              "block_table[{}] = {} outside [0, {}) for key {}", t / p.cache.page_size, block,
              p.cache.num_blocks, t);
    const int64_t slot = int64_t(block) * p.cache.page_size + t % p.cache.page_size;
    const uint8_t* rec = static_cast<const uint8_t*>(p.cache.rows) + slot * row_bytes;
    if (plain) {
      for (int c = 0; c < d_row; ++c) cache[int64_t(t) * d_row + c] = load(p.cache.dtype, rec, c);
    } else {  // the values the record stores (core/kv_format's reference dequantisation)
      std::vector<float> tmp(d_row);
      dequantize_kv_row(*kv_cache_dtype_of(p.cache.dtype), p.r, p.d_r, rec, p.cache.global_scale,
                        tmp.data());
      std::copy(tmp.begin(), tmp.end(), cache.begin() + int64_t(t) * d_row);
    }
  }

  std::vector<double> k_nope(int64_t(p.s_kv()) * p.d_n);  // [s_kv, d_n] of one head
  std::vector<double> v(int64_t(p.s_kv()) * p.d_v);       // [s_kv, d_v] of one head
  std::vector<double> score(p.s_kv());
  std::vector<double> acc(p.d_v);

  for (int h = 0; h < p.h_q; ++h) {
    const float* w_uk = p.w_uk + int64_t(h) * p.d_n * p.r;  // [d_n, r]
    const float* w_uv = p.w_uv + int64_t(h) * p.d_v * p.r;  // [d_v, r]
    for (int t = 0; t < p.s_kv(); ++t) {
      const double* c = &cache[int64_t(t) * d_row];  // [r]
      for (int j = 0; j < p.d_n; ++j) {
        double sum = 0.0;
        for (int k = 0; k < p.r; ++k) sum += double(w_uk[int64_t(j) * p.r + k]) * c[k];
        k_nope[int64_t(t) * p.d_n + j] = sum;
      }
      for (int j = 0; j < p.d_v; ++j) {
        double sum = 0.0;
        for (int k = 0; k < p.r; ++k) sum += double(w_uv[int64_t(j) * p.r + k]) * c[k];
        v[int64_t(t) * p.d_v + j] = sum;
      }
    }

    for (int s = 0; s < p.s_q; ++s) {
      const int64_t qh = int64_t(s) * p.h_q + h;  // row of q / out / scores
      const float* q = p.q + qh * d_qk;           // [d_n + d_r]: q_nope | rotated q_pe
      const int n = std::max(visible_keys(p.s_kv(), p.s_q, s, p.causal), 0);

      double max_score = -kInf;
      for (int t = 0; t < n; ++t) {
        const double* k_pe = &cache[int64_t(t) * d_row + p.r];  // [d_r]
        double dot = 0.0;
        for (int j = 0; j < p.d_n; ++j) dot += double(q[j]) * k_nope[int64_t(t) * p.d_n + j];
        for (int j = 0; j < p.d_r; ++j) dot += double(q[p.d_n + j]) * k_pe[j];
        score[t] = scale * dot;
        max_score = std::max(max_score, score[t]);
      }

      double denom = 0.0;
      for (int t = 0; t < n; ++t) denom += std::exp(score[t] - max_score);
      acc.assign(p.d_v, 0.0);
      for (int t = 0; t < n; ++t) {
        const double prob = std::exp(score[t] - max_score) / denom;
        for (int j = 0; j < p.d_v; ++j) acc[j] += prob * v[int64_t(t) * p.d_v + j];
      }

      float* out = p.out + qh * p.d_v;                         // [d_v]
      for (int j = 0; j < p.d_v; ++j) out[j] = float(acc[j]);  // all 0 for an empty row
      p.lse[int64_t(h) * p.s_q + s] =
          n > 0 ? float(max_score + std::log(denom)) : std::numeric_limits<float>::infinity();

      if (p.scores != nullptr) {
        float* sc = p.scores + qh * p.scores_stride;  // [s_kv] written, the rest untouched
        for (int t = 0; t < p.s_kv(); ++t)
          sc[t] = t < n ? float(score[t]) : -std::numeric_limits<float>::infinity();
      }
    }
  }
}

}  // namespace mla::ref
