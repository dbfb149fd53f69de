// F3 (docs/RELIABILITY.md §Checklist): config.json bytes → parse_model_config (which validates) →
// the KV and page sizing the engine derives from it. Invariants: an accepted config validates
// again; every derived size that the sizing functions accept is > 0 and consistent with the checked
// product of its factors; a rejection is a Status, never an abort or a wrapped size.
#include <cstdint>
#include <string>

#include "cache/cache_capacity.h"
#include "cache/cache_format.h"
#include "cache/memory_estimate.h"
#include "core/checked_math.h"
#include "fuzz_common.h"
#include "model/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mla;
  const std::string text(reinterpret_cast<const char*>(data), size);
  Result<ModelConfig> c = parse_model_config(text, "config.json");
  if (!c.ok()) return 0;
  Status again = validate_model_config(*c, "config.json");
  MLA_CHECK(again.ok(), "accepted config fails validation: {}", again.to_string());

  for (KvCacheDtype dtype : kAllKvCacheDtypes) {
    const int64_t record = kv_bytes_per_token(dtype, c->kv_lora_rank, c->qk_rope_head_dim);
    MLA_CHECK(record > 0, "record of {} bytes", record);
    for (int page_size = 1; page_size <= kMaxPageSize; page_size *= 4) {
      Result<int64_t> page = kv_page_bytes(record, page_size);
      if (!page.ok()) continue;
      MLA_CHECK(*page > 0 && checked_mul<int64_t>(record, page_size) == *page, "page {} x {} = {}",
                record, page_size, *page);
      // A few budgets around the size of one block, and a huge one.
      const std::optional<int64_t> block = checked_mul<int64_t>(*page, c->num_hidden_layers);
      for (uint64_t budget : {uint64_t(1) << 30, uint64_t(1) << 40, UINT64_MAX}) {
        Result<int32_t> blocks =
            num_blocks_for_budget(budget, record, c->num_hidden_layers, page_size);
        if (!blocks.ok()) continue;
        MLA_CHECK(*blocks >= 1 && *blocks <= kMaxKvBlocks, "{} blocks", *blocks);
        MLA_CHECK(block && uint64_t(*block) <= budget, "a block of {} layers x {} exceeds {}",
                  c->num_hidden_layers, *page, budget);
      }
    }
  }
  KvMemoryQuery q;
  q.dims.num_layers = c->num_hidden_layers;
  q.dims.num_heads = c->num_attention_heads;
  q.dims.head_dim = c->v_head_dim;
  q.dims.kv_lora_rank = c->kv_lora_rank;
  q.dims.qk_rope_head_dim = c->qk_rope_head_dim;
  q.context = c->max_position_embeddings;
  q.batch = 1;
  q.page_size = kDefaultPageSize;
  Result<KvMemoryEstimate> e = estimate_kv_memory(q);
  if (e.ok()) {
    for (const KvLayoutEstimate& l : e->layouts) {
      MLA_CHECK(l.bytes_per_token_layer > 0 && l.bytes_per_sequence > 0 && l.total_bytes > 0 &&
                    l.pages_per_sequence > 0 && l.page_bytes > 0 &&
                    l.paged_bytes_per_sequence >= l.bytes_per_sequence,
                "layout {} has a non-positive or inconsistent size", l.name);
      MLA_CHECK(checked_product<int64_t>({l.bytes_per_token_layer, q.dims.num_layers, q.context}) ==
                    l.bytes_per_sequence,
                "layout {}: bytes per sequence {} is not the checked product", l.name,
                l.bytes_per_sequence);
    }
  }
  return 0;
}
