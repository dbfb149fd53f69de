// Reference absorbed MLA decode over the paged latent cache (the FlashMLA contract): FP64 loops,
// a two-pass softmax per (sequence, query, head). The oracle for every fast decode kernel.
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

// Element i of a BF16, F32 or F64 array, widened exactly to FP64. (F64 queries let `mla verify`
// keep the absorbed query of its oracle in FP64; the fast kernels take BF16 or F32 only.)
double load(DType t, const void* base, int64_t i) {
  if (t == DType::kF64) return static_cast<const double*>(base)[i];
  return t == DType::kBF16 ? double(bf16_to_f32(static_cast<const uint16_t*>(base)[i]))
                           : double(static_cast<const float*>(base)[i]);
}

bool is_bf16_or_f32(DType t) {
  return t == DType::kBF16 || t == DType::kF32;
}

// One cache row [r latent | d_r rope] in FP64: plain rows widened, quantised records through
// core/kv_format's reference dequantisation (so the oracle sees the cache's stored values).
void read_row(const MlaDecodeParams& p, const uint8_t* rec, double* row) {
  const int r = p.d_v, d_r = p.d_qk - p.d_v;
  if (is_bf16_or_f32(p.cache.dtype)) {
    for (int c = 0; c < p.d_qk; ++c) row[c] = load(p.cache.dtype, rec, c);
    return;
  }
  std::vector<float> tmp(p.d_qk);
  dequantize_kv_row(*kv_cache_dtype_of(p.cache.dtype), r, d_r, rec, p.cache.global_scale,
                    tmp.data());
  for (int c = 0; c < p.d_qk; ++c) row[c] = tmp[c];
}

}  // namespace

void mla_decode(const MlaDecodeParams& p) {
  MLA_CHECK(
      (is_bf16_or_f32(p.q_dtype) || p.q_dtype == DType::kF64) &&
          (is_bf16_or_f32(p.cache.dtype) || kv_cache_dtype_of(p.cache.dtype).has_value()),
      "mla_decode ref reads bf16, f32 (or f64) q and a bf16, f32 or quantised cache, got {} and {}",
      dtype_name(p.q_dtype), dtype_name(p.cache.dtype));
  const int64_t row_bytes = kv_row_bytes(p);
  const double scale = p.softmax_scale;
  const double kInf = std::numeric_limits<double>::infinity();
  std::vector<double> q(p.d_qk);   // [d_qk] one query head, widened
  std::vector<double> score;       // [n] scaled logits of the visible keys
  std::vector<double> rows;        // [n, d_qk] the visible keys' cache rows, widened
  std::vector<double> acc(p.d_v);  // [d_v]
  std::vector<double> acc_abs;     // [d_v] Σ p |v| when abs_out is asked for

  for (int b = 0; b < p.b; ++b) {
    const int s_kv = p.cache.seq_lens[b];
    const int32_t* table =
        p.cache.block_table + int64_t(b) * p.cache.max_blocks_per_seq;  // [max_blocks]
    for (int s = 0; s < p.s_q; ++s) {
      // Keys 0 .. n-1 are visible; n <= 0 means an empty row. Only these rows are ever read, so
      // poisoned slots past cache_seqlens and unused table entries never reach the arithmetic.
      const int n = std::max(visible_keys(s_kv, p.s_q, s, p.causal), 0);
      rows.resize(size_t(n) * p.d_qk);
      for (int t = 0; t < n; ++t) {
        const int32_t block = table[t / p.cache.page_size];
        MLA_CHECK(block >= 0 && block < p.cache.num_blocks,
                  "block_table[{}][{}] = {} outside [0, {}) for key {} of {}", b,
                  t / p.cache.page_size, block, p.cache.num_blocks, t, s_kv);
        const int64_t slot = int64_t(block) * p.cache.page_size + t % p.cache.page_size;
        read_row(p, static_cast<const uint8_t*>(p.cache.rows) + slot * row_bytes,
                 &rows[size_t(t) * p.d_qk]);
      }

      for (int h = 0; h < p.h_q; ++h) {
        const int64_t qh = (int64_t(b) * p.s_q + s) * p.h_q + h;  // row of q / out / scores
        for (int c = 0; c < p.d_qk; ++c) q[c] = load(p.q_dtype, p.q, qh * p.d_qk + c);

        score.assign(n, 0.0);
        double max_score = -kInf;
        for (int t = 0; t < n; ++t) {
          double dot = 0.0;
          for (int c = 0; c < p.d_qk; ++c) dot += q[c] * rows[size_t(t) * p.d_qk + c];
          score[t] = scale * dot;
          max_score = std::max(max_score, score[t]);
        }

        // Softmax relative to the row maximum: exp never overflows and the largest term is 1.
        double denom = 0.0;
        for (int t = 0; t < n; ++t) denom += std::exp(score[t] - max_score);
        acc.assign(p.d_v, 0.0);
        acc_abs.assign(p.abs_out ? p.d_v : 0, 0.0);
        for (int t = 0; t < n; ++t) {
          const double prob = std::exp(score[t] - max_score) / denom;
          for (int c = 0; c < p.d_v; ++c) acc[c] += prob * rows[size_t(t) * p.d_qk + c];
          if (p.abs_out)
            for (int c = 0; c < p.d_v; ++c)
              acc_abs[c] += prob * std::fabs(rows[size_t(t) * p.d_qk + c]);
        }
        if (p.abs_out)
          for (int c = 0; c < p.d_v; ++c) p.abs_out[qh * p.d_v + c] = float(acc_abs[c]);

        float* out = p.out + qh * p.d_v;                         // [d_v]
        for (int c = 0; c < p.d_v; ++c) out[c] = float(acc[c]);  // all 0 for an empty row
        p.lse[(int64_t(b) * p.h_q + h) * p.s_q + s] =
            n > 0 ? float(max_score + std::log(denom)) : std::numeric_limits<float>::infinity();

        if (p.scores != nullptr) {
          float* sc = p.scores + qh * p.scores_stride;  // [s_kv] written, the rest untouched
          for (int t = 0; t < s_kv; ++t)
            sc[t] = t < n ? float(score[t]) : -std::numeric_limits<float>::infinity();
        }
      }
    }
  }
}

}  // namespace mla::ref
