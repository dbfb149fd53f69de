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

}  // namespace

// Bounds that keep every offset and count the kernels compute in int / int64 exact: keys per
// sequence (tile arithmetic adds up to a tile), rows of a call, and a row's leading dimension.
constexpr int64_t kMaxKeys = int64_t(1) << 30;
constexpr int64_t kMaxRows = int64_t(1) << 24;
constexpr int64_t kMaxRowWidth = int64_t(1) << 24;

Status validate(const MlaDecodeParams& p) {
  if (p.b < 0 || p.s_q < 1 || p.h_q < 1)
    return invalid_argument(
        fmt::format("mla_decode: need b >= 0, s_q >= 1, h_q >= 1 (got b={}, s_q={}, h_q={})", p.b,
                    p.s_q, p.h_q));
  if (p.d_v < 1 || p.d_qk < p.d_v)
    return invalid_argument(
        fmt::format("mla_decode: need 1 <= d_v <= d_qk (got d_qk={}, d_v={})", p.d_qk, p.d_v));
  if (p.page_size < 1)
    return invalid_argument(fmt::format("mla_decode: page_size {} < 1", p.page_size));
  if (int64_t(p.s_q) * p.h_q > kMaxRows || int64_t(p.h_q) * p.d_qk > kMaxRowWidth)
    return invalid_argument(
        fmt::format("mla_decode: s_q {} × h_q {} (× d_qk {}) is too large", p.s_q, p.h_q, p.d_qk));
  // F64 queries are for the reference only (an oracle that keeps the absorbed query exact); the
  // fast variants' supports() refuse them.
  if (!is_float_storage(p.q_dtype) && p.q_dtype != DType::kF64)
    return invalid_argument(
        fmt::format("mla_decode: q dtype {} (need BF16 or F32)", dtype_name(p.q_dtype)));
  if (!is_cache_storage(p.kv_dtype))
    return invalid_argument(
        fmt::format("mla_decode: kv_cache dtype {} (need BF16, F32, F8_E4M3, I8 or F4 records)",
                    dtype_name(p.kv_dtype)));
  MLA_RETURN_IF_ERROR(check_global_scale(p.kv_dtype, p.kv_global_scale, "mla_decode"));
  if (p.b > 0 && (!p.q || !p.block_table || !p.cache_seqlens || !p.out || !p.lse))
    return invalid_argument("mla_decode: q, block_table, cache_seqlens, out and lse are required");
  if (p.num_blocks < 0 || p.max_blocks_per_seq < 0)
    return invalid_argument("mla_decode: negative num_blocks or max_blocks_per_seq");
  if (p.num_blocks > 0 && !p.kv_cache) return invalid_argument("mla_decode: kv_cache is null");
  for (int b = 0; b < p.b; ++b) {
    const int s_kv = p.cache_seqlens[b];
    const std::string where = fmt::format("mla_decode: sequence {}", b);
    if (s_kv < 0) return invalid_argument(fmt::format("{}: cache_seqlens = {} < 0", where, s_kv));
    if (s_kv > kMaxKeys)
      return invalid_argument(fmt::format("{}: cache_seqlens = {} > {}", where, s_kv, kMaxKeys));
    MLA_RETURN_IF_ERROR(check_block_table(p.block_table + int64_t(b) * p.max_blocks_per_seq, s_kv,
                                          p.page_size, p.num_blocks, p.max_blocks_per_seq,
                                          where.c_str()));
    if (p.scores && p.scores_stride < s_kv)
      return invalid_argument(
          fmt::format("{}: scores_stride {} < s_kv {}", where, p.scores_stride, s_kv));
  }
  return {};
}

Status validate(const MlaPrefillParams& p) {
  if (p.s_q < 1 || p.h_q < 1 || p.d_n < 1 || p.d_r < 0 || p.d_v < 1 || p.r < 1)
    return invalid_argument(
        fmt::format("mla_prefill: need positive s_q, h_q, d_n, d_v, r and d_r >= 0 (got s_q={}, "
                    "h_q={}, d_n={}, "
                    "d_r={}, d_v={}, r={})",
                    p.s_q, p.h_q, p.d_n, p.d_r, p.d_v, p.r));
  if (p.page_size < 1)
    return invalid_argument(fmt::format("mla_prefill: page_size {} < 1", p.page_size));
  if (int64_t(p.s_q) * p.h_q > kMaxRows ||
      int64_t(p.h_q) * std::max(p.d_n + p.d_r, p.d_v) > kMaxRowWidth || p.s_kv > kMaxKeys)
    return invalid_argument(
        fmt::format("mla_prefill: s_q {}, h_q {}, s_kv {} are too large", p.s_q, p.h_q, p.s_kv));
  if (!is_cache_storage(p.kv_dtype))
    return invalid_argument(
        fmt::format("mla_prefill: kv_cache dtype {} (need BF16, F32, F8_E4M3, I8 or F4 records)",
                    dtype_name(p.kv_dtype)));
  MLA_RETURN_IF_ERROR(check_global_scale(p.kv_dtype, p.kv_global_scale, "mla_prefill"));
  if (!p.q || !p.w_uk || !p.w_uv || !p.out || !p.lse)
    return invalid_argument("mla_prefill: q, w_uk, w_uv, out and lse are required");
  if (p.s_kv < 0) return invalid_argument(fmt::format("mla_prefill: s_kv = {} < 0", p.s_kv));
  if (p.attention_dtype != DType::kF32 && p.attention_dtype != DType::kBF16)
    return invalid_argument(fmt::format("mla_prefill: attention_dtype {} is not F32 or BF16",
                                        dtype_name(p.attention_dtype)));
  if (p.s_kv > 0 && (!p.kv_cache || !p.block_table))
    return invalid_argument("mla_prefill: kv_cache and block_table are required when s_kv > 0");
  const int pages = int((int64_t(p.s_kv) + p.page_size - 1) / p.page_size);
  MLA_RETURN_IF_ERROR(
      check_block_table(p.block_table, p.s_kv, p.page_size, p.num_blocks, pages, "mla_prefill"));
  if (p.scores && p.scores_stride < p.s_kv)
    return invalid_argument(
        fmt::format("mla_prefill: scores_stride {} < s_kv {}", p.scores_stride, p.s_kv));
  return {};
}

}  // namespace mla
