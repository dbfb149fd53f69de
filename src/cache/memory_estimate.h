// KV cache memory of one model at a given context and batch, for the dense baselines (MHA, GQA-8)
// and each latent cache format: the numbers behind `mla memory`. Pure arithmetic, overflow-checked.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cache/cache_format.h"
#include "mla/status.h"

namespace mla {

// Every dim must be in [1, kMaxKvMemoryDim]; larger values are rejected rather than risk overflow
// in the per-token products.
inline constexpr int kMaxKvMemoryDim = 1 << 24;

struct KvMemoryDims {
  int num_layers = 0;        // layers holding a KV cache
  int num_heads = 0;         // H: KV heads of the MHA baseline
  int head_dim = 0;          // per-head K and V dim of the MHA/GQA baselines (the model's d_v)
  int kv_lora_rank = 0;      // r
  int qk_rope_head_dim = 0;  // d_r
};

struct KvMemoryQuery {
  KvMemoryDims dims;
  int64_t context = 0;     // tokens per sequence, >= 1
  int64_t batch = 0;       // sequences, >= 1
  int64_t page_size = 64;  // tokens per page, >= 1
};

struct KvLayoutEstimate {
  std::string name;   // machine name: "mha", "gqa8", "mla_bf16", "mla_fp8_e4m3", ...
  std::string label;  // for tables: "MHA", "GQA-8", "MLA bf16", ...
  int64_t bytes_per_token_layer = 0;
  int64_t bytes_per_sequence = 0;  // context × layers × bytes_per_token_layer (exact token slots)
  int64_t total_bytes = 0;         // batch × bytes_per_sequence
  int64_t pages_per_sequence = 0;  // ceil(context / page_size): block-table entries, shared by
                                   // all layers (each layer has its own page of page_bytes)
  int64_t page_bytes = 0;          // page_size × bytes_per_token_layer: one page of one layer
  // pages_per_sequence × page_bytes × layers: what a paged pool allocates for one sequence
  // (>= bytes_per_sequence; equal when page_size divides context).
  int64_t paged_bytes_per_sequence = 0;
  double saved_vs_mha_percent = 0;  // 100 · (1 − bytes_per_token_layer / MHA's)
};

struct KvMemoryEstimate {
  KvMemoryQuery query;
  int64_t token_slots = 0;  // context × batch
  // In order: MHA, GQA-8, then MLA in each of kAllKvCacheDtypes.
  std::vector<KvLayoutEstimate> layouts;
};

// GQA-8 uses min(kGqaKvHeads, H) KV heads. Errors (invalid_argument): a dim, context, batch or
// page_size out of range, or any byte count that does not fit in int64 (e.g. a huge context).
Result<KvMemoryEstimate> estimate_kv_memory(const KvMemoryQuery& query);

// 2^30 and 10^9: the two units `mla memory` prints.
inline double bytes_to_gib(int64_t bytes) {
  return static_cast<double>(bytes) / (1024.0 * 1024 * 1024);
}
inline double bytes_to_gb(int64_t bytes) {
  return static_cast<double>(bytes) / 1e9;
}

}  // namespace mla
