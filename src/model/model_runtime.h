// Model: a loaded DeepSeek-family checkpoint ready to run, and its forward pass over a batch of
// token chunks from any number of sequences (docs/MODELS.md: §Forward pass, §Attention, §MoE
// routing, §Absorbed attention). One config-driven code path for every family: q_lora or plain
// q_proj, absorbed MLA over the paged latent cache (decode tokens of all sequences in one kernel
// call; prefill chunks by the absorb/decompress threshold), dense or MoE FFN, final norm, lm_head.
// Activations are FP32; weights stay in their file dtype and are widened inside the weight products
// (kernels/linear.h).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cache/kv_cache_storage.h"
#include "core/kv_format.h"
#include "core/thread_pool.h"
#include "kernels/mla_attention.h"
#include "kernels/rope_table.h"
#include "mla/status.h"
#include "model/model_weights.h"

namespace mla {
namespace dist {
class Communicator;
}

// How a model split over ranks divides its routed experts (docs/ARCHITECTURE.md §Ranks).
enum class MoeSplit {
  kExperts,  // expert parallelism: E / N whole experts per rank (E must be a multiple of N)
  kWidth,    // every rank a 1 / N slice of every expert's width, as the shared experts
};

// Memory left beside the re-laid weights (RuntimeOptions::repack_weights) for everything else the
// engine holds (activations, the file's pages still read, the KV cache made after the load).
inline constexpr uint64_t kRepackHeadroomBytes = uint64_t(1) << 30;

struct RuntimeOptions {
  std::string backend = "cpu";  // "cpu" or "ref": the kernels every op runs on
  KvCacheDtype kv_dtype = KvCacheDtype::kBF16;
  // The absorbed path's threshold for prefill chunks and the rule that applies it
  // (kernels/mla_attention.h, PrefillPathRule: by default a chunk takes the absorbed path only
  // where it is short beside its cached context, never for a fresh prompt).
  int prefill_absorption_threshold = kDefaultPrefillAbsorptionThreshold;
  PrefillPathRule prefill_path_rule = PrefillPathRule::kCost;
  // The absorbed query's dtype at the decode kernel: kBF16 (default) for the BF16-dot / AMX
  // kernels, or kF32 (kernels/mla_attention.h). The model oracle bounds both.
  DType attention_q_dtype = DType::kBF16;
  // The decompressed prefill's attention tiles (MlaPrefillParams::attention_dtype) when set:
  // kI8 runs them on int8 dot products (`--attention-dtype int8`); unset, attention_q_dtype,
  // except that the loader sets kI8 when the products it holds run on int8 (weight_dtype kQ8_0,
  // a GGUF file's block formats) and the query is BF16: Model::options() holds what runs.
  std::optional<DType> prefill_attention_dtype;
  // The weight products' math (kernels/linear.h): kBF16 (default) runs the products of more than
  // 16 rows (prefill chunks, expert batches) on BF16 dot products, x rounded to BF16 (relative
  // 2^-8; tests/e2e/model_oracle.py bounds it against transformers); kF32 keeps every product in
  // FP32, and a row's result then does not depend on how many rows share its product.
  DType matmul_dtype = DType::kBF16;
  // lm_head's stored dtype: the checkpoint's when empty, else kBF16, kF8E4M3 or kI8 (block-scaled,
  // made at load: model/weight_requant.h), for the decode step's largest single read.
  std::optional<DType> lm_head_dtype;
  // The weight products' stored dtype: the checkpoint's when empty, or kQ8_0 (`--weight-dtype
  // q8_0`): every BF16 / F16 / F32 / block-FP8 weight that linear() reads (the attention and FFN
  // projections, experts, lm_head unless lm_head_dtype says otherwise; not the router nor the
  // absorbed path's per-head products, which stay exact) requantised at load into Q8_0 blocks
  // (model/weight_requant.h: within d · (1/2 + 127 · 2^-11) of each value, d = amax / 127 of its
  // 32 values), what llama.cpp's Q8_0 files hold. Prefill then runs on int8 dot products at twice
  // the BF16 dot product's rate, and decode on the int8 GEMV; weights already in a GGUF block
  // format keep it. Held in the repack arena (the memory check below applies).
  std::optional<DType> weight_dtype;
  // Re-lay weights at load into the layouts the CPU kernels run faster, keeping every value
  // (linear_preferred_dtype: Q8_0 / Q4_K as kQ8_0R16 / kQ4_KR16 on AVX512-VNNI, BF16 / block-FP8
  // as kBF16R16 / kF8E4M3R16 on AVX512_BF16); the file's copy of each is dropped from memory
  // afterwards. false keeps the file's layouts (`--repack off`). The re-laid copies are anonymous
  // memory: when they would not fit in MemAvailable (read from meminfo_path) with
  // kRepackHeadroomBytes to spare, the load keeps the file's layouts and says so on stderr
  // (RepackStats::skipped_for_memory), rather than the kernel's OOM killer ending it.
  bool repack_weights = true;
  std::string meminfo_path = "/proc/meminfo";
  // Longest sequence (prompt + generated) the RoPE table covers; 0: max_position_embeddings,
  // capped at kDefaultMaxContext to keep the table small on machines that will never get there.
  int64_t max_context = 0;
  // The ranks this model is split over (dist/communicator.h; docs/ARCHITECTURE.md §Ranks): each
  // rank loads its heads, experts, FFN columns and vocabulary rows, and forward meets the others
  // at two all-reduces per layer. Null (or one rank): the whole model in this process.
  dist::Communicator* comm = nullptr;
  // Across ranks: whole experts per rank (the default), or a slice of each expert's width, which
  // keeps the ranks even at batch 1, where a token's K experts rarely fall evenly on them
  // (docs/BENCHMARKS.md "Ranks").
  MoeSplit moe_split = MoeSplit::kExperts;
};

// The dtype the decompressed prefill's attention tiles run in under o (see
// RuntimeOptions::prefill_attention_dtype).
inline DType prefill_attention_dtype(const RuntimeOptions& o) {
  return o.prefill_attention_dtype.value_or(o.attention_q_dtype);
}
inline constexpr int64_t kDefaultMaxContext = 32768;

// One sequence's part of a forward batch: tokens [start, start + n_tokens) of it, whose cache rows
// were reserved (SequenceBlocks::append) before the call; forward writes them.
struct ForwardSeq {
  std::span<const int32_t> block_table;  // covers positions [0, start + n_tokens)
  int64_t start = 0;                     // tokens already in the cache
  int n_tokens = 0;
};

struct ForwardBatch {
  std::span<const int32_t> tokens;  // [Σ n_tokens]: each sequence's chunk, in seqs order
  std::vector<ForwardSeq> seqs;
  bool all_logits = false;  // logits for every token, else for each sequence's last token
  // Optional: hidden[l] ← the residual stream after layer l, [Σ n_tokens, D] (for dumps).
  std::vector<std::vector<float>>* hidden_dump = nullptr;
};

struct ForwardStats {
  int absorbed_chunks = 0;      // prefill chunks (n_tokens > 1) on the absorbed path, per layer
  int decompressed_chunks = 0;  // ... on the decompressed path
  int decode_tokens = 0;        // n_tokens == 1 rows, batched into one decode call per layer
};

class Model {
 public:
  // load_model_weights(dir) and the per-layer preparation: norms widened to FP32, kv_b_proj split
  // into W_UK / W_UV (FP32), the RoPE table, the MoE routing rules. Errors as load_model_weights,
  // plus invalid_argument for options (backend name, context) and configs this path cannot run
  // (hidden_act other than silu).
  static Result<std::unique_ptr<Model>> load(const std::string& dir,
                                             const RuntimeOptions& options = {});
  ~Model();

  const ModelConfig& config() const;
  const RuntimeOptions& options() const;
  const ModelWeights& weights() const;
  int64_t max_context() const;

  // Weight bytes one decode token must read, in the file's dtypes (FP8 scales included): every
  // layer's attention projections (kv_b_proj once: W_UK and W_UV), the dense FFN or the router,
  // K routed experts and the shared experts, lm_head, one embedding row. Divided into the
  // machine's memory bandwidth it bounds decode tokens/s for one sequence.
  int64_t active_weight_bytes_per_token() const;
  // The dtype lm_head's values are stored in at run time (RuntimeOptions::lm_head_dtype, else the
  // file's), whatever layout repack_weights gave them (BF16 for BF16_R16).
  DType lm_head_dtype() const;
  // What RuntimeOptions::repack_weights did at load: the weights re-laid, their bytes (values and
  // block scales, held in memory in place of the file's pages) and the seconds it took.
  struct RepackStats {
    int weights = 0;
    int64_t bytes = 0;
    double seconds = 0;
    int64_t huge_page_bytes = -1;     // of `bytes`, on 2 MiB pages after the load (-1: unknown)
    bool skipped_for_memory = false;  // too little memory available: the file's layouts kept
    int requantized = 0;              // of `weights`, requantised (RuntimeOptions::weight_dtype)
  };
  RepackStats repack_stats() const;

  // Floating-point operations (2 per multiply-add) of a prefill of `tokens` tokens in one chunk,
  // as forward() runs it: every weight product on every token (kv_b_proj once: the decompressed
  // path's up-projection, K routed experts and the shared ones), causal attention (d_qk + d_v
  // per query-key pair and head), lm_head on the last token; but in the last layer of a model of
  // several, kv_a on every token and the rest on the last token alone (its query against all
  // the keys). Norms, RoPE, routing and softmax are not counted.
  double prefill_flops(int64_t tokens) const;

  // The cache this model needs: num_layers, record bytes of options().kv_dtype (and, on the
  // leader of several ranks, record_copies).
  KvCacheShape cache_shape(int32_t num_blocks, int page_size) const;
  // The global scale of an nvfp4 cache (fixed per layer).
  float kv_global_scale() const;

  // Runs the batch, writing each token's latent cache row and `logits` ([Σ n_tokens, vocab] when
  // all_logits, else [seqs, vocab]; resized). invalid_argument for a token id outside the vocab,
  // a position at or past max_context(), a block table too short, n_tokens < 1.
  //
  // Across ranks the leader calls forward as above: it sends the batch (and the cache's
  // copy-on-write copies since the last call) to the followers, which run it in follow(), and
  // returns the full logits; the followers' halves meet in all-reduces. A failure after the
  // batch was sent ends every rank (Communicator::abort): a returned error would leave the others
  // waiting inside a collective.
  Result<ForwardStats> forward(const ForwardBatch& batch, KvCacheStorage& cache, ThreadPool& pool,
                               std::vector<float>& logits);

  // A follower rank's whole life after load: runs each batch the leader's forward sends, on a
  // cache of the leader's shape, until the leader's Model is destroyed. Returns then (ok), or an
  // error for a call on the leader or a model alone.
  Status follow(ThreadPool& pool);
  // This process's rank and the rank count (0 and 1 alone).
  int rank() const;
  int ranks() const;
  // What this rank holds, for logs: "rank 1 of 2: heads 8-15, routed experts 32-63 whole" or
  // "... every routed expert's width 704-1407 of 1408"; "" alone.
  std::string split_summary() const;

  struct Impl;

 private:
  explicit Model(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mla
