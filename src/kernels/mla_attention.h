// The layer-level MLA attention op: given the rotated query of a chunk of s_q tokens and one
// sequence's paged latent cache (the chunk's own rows already appended), computes the per-head
// attention output [s_q, h_q, d_v] for o_proj, by the absorbed path or the decompressed path
// (choose_mla_path). Both paths run through the registry, so `backend` picks ref or cpu kernels.
#pragma once

#include <optional>
#include <string_view>

#include "core/aligned_buffer.h"
#include "core/thread_pool.h"
#include "kernels/mla_absorbed_weights.h"
#include "kernels/mla_params.h"

namespace mla {

enum class MlaPath { kAbsorbed, kDecompressed };
const char* mla_path_name(MlaPath p);

inline constexpr int kDefaultPrefillAbsorptionThreshold = 256;

// How a chunk of s_q queries after `prior` cached tokens picks its path under the threshold T
// (the chunk length up to which the absorbed path is faster over a long cached context: what
// `mla tune` fits to the crossovers it measures over the contexts it sweeps, cost_rule_threshold).
//   kCost (the engine's): absorbed iff s_q · (prior + s_q / 2) ≤ T · prior. Per query the
//     absorbed path's attention costs 2r + d_r per key against d_n + d_r + d_v decompressed
//     (1,088 against 320 at DeepSeek dims), while the decompressed path up-projects every
//     context token (r · (d_n + d_v) each, what absorbing costs per query): the absorbed path
//     wins only where the chunk is short beside its context, and never for a fresh prompt
//     (prior 0), where it ran 3-6x slower at 16 to 256 tokens (docs/BENCHMARKS.md "The
//     absorbed path only over a cached context"). Over a long context it is s_q ≤ T.
//   kLength: absorbed iff s_q ≤ T, whatever the context (checking either path on any chunk).
enum class PrefillPathRule { kCost, kLength };

// The dtype of the absorbed query the decode kernel reads: kF32 (the FP32 variants: exact to
// FP32 activations) or kBF16 (rounded once, FlashMLA's numerics: the BF16-dot and AMX variants,
// probabilities in BF16 too; docs/kernels/mla_decode.md gives the error bounds). The reference
// backend always keeps it in FP64.
inline constexpr DType kDefaultAbsorbedQueryDtype = DType::kF32;

struct MlaAttentionParams {
  int s_q = 0, d_r = 64;
  const float* q = nullptr;  // [s_q, h_q, d_n + d_r]: q_nope | rotated q_pe
  // One sequence (block-table row 0, s_kv = seq_lens[0] keys, the chunk's own rows included).
  PagedLatentCache cache;
  const MlaAbsorbedWeights* w = nullptr;
  float softmax_scale = 1.0f;
  bool causal = true;
  // The path's threshold and rule (PrefillPathRule); the threshold is measured per machine by
  // `mla tune` (docs/kernels/mla_decode.md).
  int prefill_absorption_threshold = kDefaultPrefillAbsorptionThreshold;
  PrefillPathRule prefill_path_rule = PrefillPathRule::kCost;
  // Absorbed path: the absorbed query's dtype; decompressed path: the up-projections' products
  // and the attention tiles (MlaPrefillParams::attention_dtype).
  DType absorbed_q_dtype = kDefaultAbsorbedQueryDtype;
  // Decompressed path's MlaPrefillParams::attention_dtype when set (kI8: the int8 tiles, and on
  // the absorbed path MlaDecodeParams::int8_products); unset, absorbed_q_dtype.
  std::optional<DType> decompressed_dtype;
  float* out = nullptr;  // [s_q, h_q, d_v] fp32
  float* lse = nullptr;  // [h_q, s_q] fp32
};

MlaPath choose_mla_path(int s_q, int threshold, int prior, PrefillPathRule rule);

// The threshold T under which the cost rule's crossover over `prior` cached tokens falls at
// `crossover`: the smallest T for which a chunk of `crossover` queries is absorbed and one of
// crossover + 1 is not, T = ⌈crossover · (2 prior + crossover) / (2 prior)⌉ (≥ crossover; equal
// as prior grows). What `mla tune` stores from a crossover it measured over a context of `prior`
// tokens; prior 0 (no T absorbs there) and crossover 0 give crossover.
int cost_rule_threshold(int crossover, int prior);

// Runs the chosen path with the best supported variant of `backend` ("cpu" or "ref").
Result<MlaPath> mla_attention(const MlaAttentionParams& p, ThreadPool& pool,
                              std::string_view backend = "cpu");

// The decode step of b sequences with one new token each (its row already in the cache), as one
// absorbed-decode kernel call: every cache tile is read once for all heads of its sequence.
struct MlaDecodeBatchParams {
  int b = 0, d_r = 64;
  const float* q = nullptr;  // [b, h_q, d_n + d_r]: q_nope | rotated q_pe
  PagedLatentCache cache;    // b sequences, the new token's row included
  const MlaAbsorbedWeights* w = nullptr;
  float softmax_scale = 1.0f;
  DType absorbed_q_dtype = kDefaultAbsorbedQueryDtype;
  float* out = nullptr;        // [b, h_q, d_v] fp32
  float* lse = nullptr;        // [b, h_q] fp32
  bool int8_products = false;  // MlaDecodeParams::int8_products
};
Status mla_decode_batch(const MlaDecodeBatchParams& p, ThreadPool& pool,
                        std::string_view backend = "cpu");

}  // namespace mla
