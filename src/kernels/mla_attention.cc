// mla_attention: path choice by threshold and the glue around the decode / prefill kernels.
#include "kernels/mla_attention.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "core/dtype.h"
#include "kernels/ref/mla_ref.h"
#include "kernels/registry.h"

namespace mla {

const char* mla_path_name(MlaPath p) {
  return p == MlaPath::kAbsorbed ? "absorbed" : "decompressed";
}

MlaPath choose_mla_path(int s_q, int threshold, int prior, PrefillPathRule rule) {
  const bool absorbed =
      rule == PrefillPathRule::kLength
          ? s_q <= threshold
          : int64_t(s_q) * (2 * int64_t(prior) + s_q) <= 2 * int64_t(threshold) * int64_t(prior);
  return absorbed ? MlaPath::kAbsorbed : MlaPath::kDecompressed;
}

int cost_rule_threshold(int crossover, int prior) {
  if (prior <= 0 || crossover <= 0) return crossover;
  const int64_t num = int64_t(crossover) * (2 * int64_t(prior) + crossover),
                den = 2 * int64_t(prior);
  return int(std::min<int64_t>((num + den - 1) / den, std::numeric_limits<int>::max()));
}

namespace {

// The absorbed path for b sequences of s_q queries: fold W_UK into the query, run the decode
// kernel over the latent cache, unfold W_UV from the latent output.
struct AbsorbedCall {
  int b = 0, s_q = 0, d_r = 0;
  const float* q = nullptr;  // [b, s_q, h_q, d_n + d_r]
  PagedLatentCache cache;    // b sequences
  const MlaAbsorbedWeights* w = nullptr;
  float softmax_scale = 1.0f;
  bool causal = true;
  DType absorbed_q_dtype = DType::kF32;  // kF32 or kBF16
  float* out = nullptr;                  // [b, s_q, h_q, d_v]
  float* lse = nullptr;                  // [b, h_q, s_q]
  bool int8_products = false;            // MlaDecodeParams::int8_products
};

Status check_absorbed_q_dtype(const char* op, DType t) {
  if (t == DType::kF32 || t == DType::kBF16) return Status();
  return invalid_argument(
      fmt::format("{}: absorbed_q_dtype {} is not f32 or bf16", op, dtype_name(t)));
}

Status run_absorbed(const AbsorbedCall& c, ThreadPool& pool, std::string_view backend) {
  const MlaAbsorbedWeights& w = *c.w;
  const int H = w.h_q, r = w.r, d_n = w.d_n, d_v = w.d_v;
  const int rows = c.b * c.s_q;  // (sequence, query) pairs: absorb and unabsorb see them alike
  const int d_abs = r + c.d_r;
  MLA_ASSIGN_OR_RETURN(auto q_abs,
                       AlignedBuffer<float>::allocate(size_t(rows) * H * d_abs, "absorbed query"));
  MLA_ASSIGN_OR_RETURN(auto o_lat,
                       AlignedBuffer<float>::allocate(size_t(rows) * H * r, "latent output"));
  // The reference keeps the absorbed query in FP64 (its decode reads F64 queries).
  const bool ref = backend == "ref";
  std::vector<double> q_abs64, o_lat64, out64;
  if (ref) {
    q_abs64.resize(q_abs.size());
    ref::absorb_query(rows, H, d_n, c.d_r, r, c.q, w.w_uk.data(), q_abs64.data());
  } else {
    MLA_RETURN_IF_ERROR(absorb_query(rows, c.d_r, c.q, w, q_abs.data(), pool));
  }
  MlaDecodeParams dp;
  dp.b = c.b;
  dp.s_q = c.s_q;
  dp.h_q = H;
  dp.d_qk = d_abs;
  dp.d_v = r;
  dp.cache = c.cache;
  dp.q_dtype = ref ? DType::kF64 : DType::kF32;
  dp.q = ref ? static_cast<const void*>(q_abs64.data()) : q_abs.data();
  std::vector<uint16_t> q_abs16;  // [rows, H, d_abs] when the kernel takes a BF16 query
  if (!ref && c.absorbed_q_dtype == DType::kBF16) {
    q_abs16.resize(q_abs.size());
    std::transform(q_abs.begin(), q_abs.end(), q_abs16.begin(), f32_to_bf16);
    dp.q_dtype = DType::kBF16;
    dp.q = q_abs16.data();
  }
  dp.softmax_scale = c.softmax_scale;
  dp.causal = c.causal;
  dp.out = o_lat.data();
  dp.lse = c.lse;
  dp.int8_products = c.int8_products && !ref;
  MLA_ASSIGN_OR_RETURN(const MlaDecodeVariant* v, select_variant(dp, backend));
  MLA_RETURN_IF_ERROR(run_variant(*v, dp, pool));
  if (ref) {
    o_lat64.assign(o_lat.begin(), o_lat.end());
    out64.resize(size_t(rows) * H * d_v);
    ref::unabsorb_output(rows, H, d_v, r, o_lat64.data(), w.w_uv.data(), out64.data());
    for (size_t i = 0; i < out64.size(); ++i) c.out[i] = float(out64[i]);
  } else {
    MLA_RETURN_IF_ERROR(unabsorb_output(rows, o_lat.data(), w, c.out, pool));
  }
  return Status();
}

}  // namespace

Status mla_decode_batch(const MlaDecodeBatchParams& p, ThreadPool& pool, std::string_view backend) {
  if (!p.w) return invalid_argument("mla_decode_batch: weights are required");
  MLA_RETURN_IF_ERROR(check_absorbed_q_dtype("mla_decode_batch", p.absorbed_q_dtype));
  if (p.b == 0) return Status();
  return run_absorbed({.b = p.b,
                       .s_q = 1,
                       .d_r = p.d_r,
                       .q = p.q,
                       .cache = p.cache,
                       .w = p.w,
                       .softmax_scale = p.softmax_scale,
                       .causal = true,
                       .absorbed_q_dtype = p.absorbed_q_dtype,
                       .out = p.out,
                       .lse = p.lse,
                       .int8_products = p.int8_products},
                      pool, backend);
}

Result<MlaPath> mla_attention(const MlaAttentionParams& p, ThreadPool& pool,
                              std::string_view backend) {
  if (!p.w) return invalid_argument("mla_attention: weights are required");
  MLA_RETURN_IF_ERROR(check_absorbed_q_dtype("mla_attention", p.absorbed_q_dtype));
  const MlaAbsorbedWeights& w = *p.w;
  const int H = w.h_q, r = w.r, d_n = w.d_n, d_v = w.d_v;
  const int prior = p.cache.seq_lens ? std::max(0, p.cache.seq_lens[0] - p.s_q) : 0;
  const MlaPath path =
      choose_mla_path(p.s_q, p.prefill_absorption_threshold, prior, p.prefill_path_rule);
  if (path == MlaPath::kDecompressed) {
    MlaPrefillParams pp;
    pp.s_q = p.s_q;
    pp.h_q = H;
    pp.d_n = d_n;
    pp.d_r = p.d_r;
    pp.d_v = d_v;
    pp.r = r;
    pp.q = p.q;
    pp.cache = p.cache;
    pp.w_uk = w.w_uk.data();
    pp.w_uv = w.w_uv.data();
    pp.softmax_scale = p.softmax_scale;
    pp.causal = p.causal;
    pp.attention_dtype = p.decompressed_dtype.value_or(p.absorbed_q_dtype);
    pp.out = p.out;
    pp.lse = p.lse;
    MLA_ASSIGN_OR_RETURN(const MlaPrefillVariant* v, select_variant(pp, backend));
    MLA_RETURN_IF_ERROR(run_variant(*v, pp, pool));
    return path;
  }

  const AbsorbedCall c{.b = 1,
                       .s_q = p.s_q,
                       .d_r = p.d_r,
                       .q = p.q,
                       .cache = p.cache,
                       .w = &w,
                       .softmax_scale = p.softmax_scale,
                       .causal = p.causal,
                       .absorbed_q_dtype = p.absorbed_q_dtype,
                       .out = p.out,
                       .lse = p.lse,
                       .int8_products = p.decompressed_dtype == DType::kI8};
  MLA_RETURN_IF_ERROR(run_absorbed(c, pool, backend));
  return path;
}

}  // namespace mla
