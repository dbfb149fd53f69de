// validate() for the MLA op parameters: the one place that checks what kernels then trust.
#include "kernels/mla_params.h"

#include <fmt/format.h>

#include <cmath>

namespace mla {

namespace {

bool is_float_storage(DType t) {
  return t == DType::kBF16 || t == DType::kF32;
}
bool is_cache_storage(DType t) {
  return t == DType::kF32 || kv_cache_dtype_of(t).has_value();
}

Status check_global_scale(DType kv_dtype, float g, const char* op) {
  if (kv_dtype == DType::kE2M1 && !(g > 0.0f && std::isfinite(g)))
    return invalid_argument(
        fmt::format("{}: nvfp4 kv_global_scale {} must be positive and finite", op, g));
  return {};
}

// Checks the block-table entries a sequence of s_kv tokens uses (and only those).
Status check_block_table(const int32_t* row, int s_kv, int page_size, int num_blocks,
                         int max_blocks, const char* where) {
  const int64_t pages = (int64_t(s_kv) + page_size - 1) / page_size;
  if (pages > max_blocks)
    return invalid_argument(
        fmt::format("{}: {} keys need {} pages of {} but the block table has {} columns", where,
                    s_kv, pages, page_size, max_blocks));
  for (int64_t i = 0; i < pages; ++i)
    if (row[i] < 0 || row[i] >= num_blocks)
      return invalid_argument(
          fmt::format("{}: block_table[{}] = {} is outside [0, {})", where, i, row[i], num_blocks));
  return {};
}

// Bounds that keep every offset and count the kernels compute in int / int64 exact: keys per
// sequence (tile arithmetic adds up to a tile), rows of a call, and a row's leading dimension.
constexpr int64_t kMaxKeys = int64_t(1) << 30;
constexpr int64_t kMaxRows = int64_t(1) << 24;
constexpr int64_t kMaxRowWidth = int64_t(1) << 24;

// The paged-cache contract (kernels/paged_latent_cache.h) for b sequences; scores_stride >= 0:
// score rows of that many columns are written.
Status validate_cache(const PagedLatentCache& c, int b, const char* op, int64_t scores_stride) {
  if (c.page_size < 1)
    return invalid_argument(fmt::format("{}: page_size {} < 1", op, c.page_size));
  if (!is_cache_storage(c.dtype))
    return invalid_argument(
        fmt::format("{}: kv_cache dtype {} (need BF16, F32, F8_E4M3, I8 or F4 records)", op,
                    dtype_name(c.dtype)));
  MLA_RETURN_IF_ERROR(check_global_scale(c.dtype, c.global_scale, op));
  if (c.num_blocks < 0 || c.max_blocks_per_seq < 0)
    return invalid_argument(fmt::format("{}: negative num_blocks or max_blocks_per_seq", op));
  if (c.num_blocks > 0 && !c.rows) return invalid_argument(fmt::format("{}: kv_cache is null", op));
  if (b > 0 && !c.seq_lens)
    return invalid_argument(fmt::format("{}: seq_lens (cache_seqlens) are required", op));
  for (int i = 0; i < b; ++i) {
    const int s_kv = c.seq_lens[i];
    const std::string where = fmt::format("{}: sequence {}", op, i);
    if (s_kv < 0)
      return invalid_argument(fmt::format("{}: seq_lens (cache_seqlens) = {} < 0", where, s_kv));
    if (s_kv > kMaxKeys)
      return invalid_argument(
          fmt::format("{}: seq_lens (cache_seqlens) = {} > {}", where, s_kv, kMaxKeys));
    if (s_kv > 0 && !c.block_table)
      return invalid_argument(fmt::format("{}: block_table is required", where));
    if (s_kv > 0)
      MLA_RETURN_IF_ERROR(check_block_table(c.block_table + int64_t(i) * c.max_blocks_per_seq, s_kv,
                                            c.page_size, c.num_blocks, c.max_blocks_per_seq,
                                            where.c_str()));
    if (scores_stride >= 0 && scores_stride < s_kv)
      return invalid_argument(
          fmt::format("{}: scores_stride {} < s_kv {}", where, scores_stride, s_kv));
  }
  return {};
}

}  // namespace

Status validate(const MlaDecodeParams& p) {
  if (p.b < 0 || p.s_q < 1 || p.h_q < 1)
    return invalid_argument(
        fmt::format("mla_decode: need b >= 0, s_q >= 1, h_q >= 1 (got b={}, s_q={}, h_q={})", p.b,
                    p.s_q, p.h_q));
  if (p.d_v < 1 || p.d_qk < p.d_v)
    return invalid_argument(
        fmt::format("mla_decode: need 1 <= d_v <= d_qk (got d_qk={}, d_v={})", p.d_qk, p.d_v));
  if (int64_t(p.s_q) * p.h_q > kMaxRows || int64_t(p.h_q) * p.d_qk > kMaxRowWidth)
    return invalid_argument(
        fmt::format("mla_decode: s_q {} × h_q {} (× d_qk {}) is too large", p.s_q, p.h_q, p.d_qk));
  // F64 queries are for the reference only (an oracle that keeps the absorbed query exact); the
  // fast variants' supports() refuse them.
  if (!is_float_storage(p.q_dtype) && p.q_dtype != DType::kF64)
    return invalid_argument(
        fmt::format("mla_decode: q dtype {} (need BF16 or F32)", dtype_name(p.q_dtype)));
  if (p.b > 0 && (!p.q || !p.out || !p.lse))
    return invalid_argument("mla_decode: q, out and lse are required");
  return validate_cache(p.cache, p.b, "mla_decode", p.scores ? p.scores_stride : -1);
}

Status validate(const MlaPrefillParams& p) {
  if (p.s_q < 1 || p.h_q < 1 || p.d_n < 1 || p.d_r < 0 || p.d_v < 1 || p.r < 1)
    return invalid_argument(
        fmt::format("mla_prefill: need positive s_q, h_q, d_n, d_v, r and d_r >= 0 (got s_q={}, "
                    "h_q={}, d_n={}, "
                    "d_r={}, d_v={}, r={})",
                    p.s_q, p.h_q, p.d_n, p.d_r, p.d_v, p.r));
  if (int64_t(p.s_q) * p.h_q > kMaxRows ||
      int64_t(p.h_q) * std::max(p.d_n + p.d_r, p.d_v) > kMaxRowWidth || p.s_kv() > kMaxKeys)
    return invalid_argument(
        fmt::format("mla_prefill: s_q {}, h_q {}, s_kv {} are too large", p.s_q, p.h_q, p.s_kv()));
  if (!p.q || !p.w_uk || !p.w_uv || !p.out || !p.lse)
    return invalid_argument("mla_prefill: q, w_uk, w_uv, out and lse are required");
  if (p.attention_dtype != DType::kF32 && p.attention_dtype != DType::kBF16 &&
      p.attention_dtype != DType::kI8)
    return invalid_argument(fmt::format("mla_prefill: attention_dtype {} is not F32, BF16 or I8",
                                        dtype_name(p.attention_dtype)));
  return validate_cache(p.cache, 1, "mla_prefill", p.scores ? p.scores_stride : -1);
}

}  // namespace mla
