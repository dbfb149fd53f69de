// KV cache memory estimates for the dense baselines and the latent cache formats.
#include "cache/memory_estimate.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/checked_math.h"

namespace mla {
namespace {

Status check_range(const char* what, int64_t value, int64_t max) {
  if (value < 1 || value > max)
    return invalid_argument(fmt::format("{} must be in [1, {}], got {}", what, max, value));
  return Status();
}

// a · b, or an error naming the layout and the query when the product leaves int64.
Result<int64_t> mul(int64_t a, int64_t b, const std::string& layout, const KvMemoryQuery& q) {
  const std::optional<int64_t> out = checked_mul(a, b);
  if (!out)
    return invalid_argument(fmt::format(
        "{} overflows a 64-bit byte count (context {}, batch {}, {} layers, page size {})",
        layout.empty() ? "context x batch" : "KV cache size of layout " + layout, q.context,
        q.batch, q.dims.num_layers, q.page_size));
  return *out;
}

Result<KvLayoutEstimate> estimate_one(std::string name, std::string label, int64_t record_bytes,
                                      int64_t mha_record_bytes, const KvMemoryQuery& q) {
  KvLayoutEstimate e;
  e.name = std::move(name);
  e.label = std::move(label);
  e.bytes_per_token_layer = record_bytes;
  const int64_t layers = q.dims.num_layers;
  MLA_ASSIGN_OR_RETURN(int64_t per_token, mul(record_bytes, layers, e.label, q));
  MLA_ASSIGN_OR_RETURN(e.bytes_per_sequence, mul(per_token, q.context, e.label, q));
  MLA_ASSIGN_OR_RETURN(e.total_bytes, mul(e.bytes_per_sequence, q.batch, e.label, q));
  e.pages_per_sequence = *checked_div_ceil(q.context, q.page_size);  // both checked >= 1
  MLA_ASSIGN_OR_RETURN(e.page_bytes, mul(q.page_size, record_bytes, e.label, q));
  MLA_ASSIGN_OR_RETURN(int64_t page_all_layers, mul(e.page_bytes, layers, e.label, q));
  MLA_ASSIGN_OR_RETURN(e.paged_bytes_per_sequence,
                       mul(page_all_layers, e.pages_per_sequence, e.label, q));
  e.saved_vs_mha_percent =
      100.0 * (1.0 - static_cast<double>(record_bytes) / static_cast<double>(mha_record_bytes));
  return e;
}

}  // namespace

Result<KvMemoryEstimate> estimate_kv_memory(const KvMemoryQuery& q) {
  const KvMemoryDims& d = q.dims;
  MLA_RETURN_IF_ERROR(check_range("layers", d.num_layers, kMaxKvMemoryDim));
  MLA_RETURN_IF_ERROR(check_range("num_attention_heads", d.num_heads, kMaxKvMemoryDim));
  MLA_RETURN_IF_ERROR(check_range("head dim", d.head_dim, kMaxKvMemoryDim));
  MLA_RETURN_IF_ERROR(check_range("kv_lora_rank", d.kv_lora_rank, kMaxKvMemoryDim));
  MLA_RETURN_IF_ERROR(check_range("qk_rope_head_dim", d.qk_rope_head_dim, kMaxKvMemoryDim));
  MLA_RETURN_IF_ERROR(check_range("context", q.context, INT64_MAX));
  MLA_RETURN_IF_ERROR(check_range("batch", q.batch, INT64_MAX));
  MLA_RETURN_IF_ERROR(check_range("page size", q.page_size, kMaxKvMemoryDim));

  KvMemoryEstimate out;
  out.query = q;
  MLA_ASSIGN_OR_RETURN(out.token_slots, mul(q.context, q.batch, "", q));

  const int64_t mha = dense_kv_bytes_per_token(d.num_heads, d.head_dim);
  const int gqa_heads = std::min(kGqaKvHeads, d.num_heads);
  const int64_t gqa = dense_kv_bytes_per_token(gqa_heads, d.head_dim);
  MLA_ASSIGN_OR_RETURN(KvLayoutEstimate e_mha, estimate_one("mha", "MHA", mha, mha, q));
  out.layouts.push_back(std::move(e_mha));
  MLA_ASSIGN_OR_RETURN(KvLayoutEstimate e_gqa,
                       estimate_one(fmt::format("gqa{}", kGqaKvHeads),
                                    fmt::format("GQA-{}", kGqaKvHeads), gqa, mha, q));
  out.layouts.push_back(std::move(e_gqa));
  for (KvCacheDtype dtype : kAllKvCacheDtypes) {
    const std::string_view dn = kv_cache_dtype_name(dtype);
    MLA_ASSIGN_OR_RETURN(
        KvLayoutEstimate e,
        estimate_one(fmt::format("mla_{}", dn), fmt::format("MLA {}", dn),
                     kv_bytes_per_token(dtype, d.kv_lora_rank, d.qk_rope_head_dim), mha, q));
    out.layouts.push_back(std::move(e));
  }
  return out;
}

}  // namespace mla
