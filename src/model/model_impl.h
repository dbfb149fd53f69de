// Model's prepared state (model_runtime.h), shared by the loader and the forward pass only.
#pragma once

#include <vector>

#include "core/aligned_buffer.h"
#include "kernels/linear.h"
#include "model/model_runtime.h"
#include "model/model_shard.h"
#include "model/moe_routing.h"
#include "model/weight_requant.h"

namespace mla {

struct MlpLinear {  // SwiGLU: down(silu(gate(x)) ⊙ up(x))
  LinearWeight gate, up, down;
  int width = 0;
};

struct LayerRuntime {
  std::vector<float> input_norm, post_norm;  // [D]
  std::vector<float> q_a_norm;               // [r_q] (q_lora only)
  std::vector<float> kv_a_norm;              // [r]
  LinearWeight q_proj;                       // plain query: [H·d_qk, D]
  LinearWeight q_a, q_b;                     // q_lora: [r_q, D], [H·d_qk, r_q]
  LinearWeight kv_a;                         // [r + d_r, D]
  LinearWeight o_proj;                       // [D, H·d_v]
  MlaAbsorbedWeights absorbed;               // kv_b_proj as W_UK / W_UV, FP32
  bool moe = false;
  MlpLinear mlp;                   // dense layers
  LinearWeight router;             // [E, D]
  std::vector<float> router_bias;  // [E] (noaux_tc), FP32
  std::vector<MlpLinear> experts;  // this rank's: routed experts [expert_first, + size)
  int expert_first = 0;
  MlpLinear shared;  // width 0 when n_shared_experts is 0 (or this rank holds none of it)
};

struct Model::Impl {
  ModelWeights weights;
  RuntimeOptions options;
  int64_t max_context = 0;
  RopeTable rope;
  float softmax_scale = 1.0f;
  float latent_norm_eps =
      1e-6f;  // q_a / kv_a layernorms: the reference's default, not the config's
  // MiniCPM3's scalings (1 for DeepSeek models): embeddings × embed_scale, residual branches ×
  // residual_scale, the final normed hidden state ÷ logits_divisor.
  float embed_scale = 1.0f, residual_scale = 1.0f, logits_divisor = 1.0f;
  MoeRouting routing;
  std::vector<LayerRuntime> layers;
  std::vector<float> final_norm;    // [D]
  LinearWeight embed, lm_head;      // [vocab, D]
  RequantizedWeight lm_head_store;  // lm_head in options.lm_head_dtype, when that differs
  WeightArena repacked;             // options.repack_weights: the weights' new layouts
  Model::RepackStats repack_stats;
  // Ranks (docs/ARCHITECTURE.md §Ranks). Alone: comm null, every head and the whole vocabulary.
  dist::Communicator* comm = nullptr;
  int rank = 0, ranks = 1;
  int heads = 0;  // this rank's attention heads (the q / absorbed / o_proj slices)
  std::vector<int64_t> vocab_counts;  // lm_head rows of each rank, in rank order
  SliceStore slices;                  // this rank's copies of its weights (ranks > 1)
};

// Every weight the forward pass reads only through linear() (not the embedding table, whose rows
// are looked up) re-laid in the layouts the backend runs faster (options.repack_weights) and, with
// options.weight_dtype, requantised first (all but the router and the per-head products), held in
// m.repacked (model_repack.cc). Alone (one rank), what stays a view of the file is then paged in
// (the loader does not page the file in whole first when it repacks).
Status repack_weights(Model::Impl& m, const std::string& dir);

// forward's checks of the batch and cache, before anything runs (or is sent to other ranks).
Status check_forward(const Model::Impl& m, const ForwardBatch& b, const KvCacheStorage& cache);

// One forward pass on this process's weights and cache, the batch already checked; across ranks,
// every rank runs it with the same batch (model_dist.cc).
Result<ForwardStats> forward_local(const Model::Impl& m, const ForwardBatch& b,
                                   KvCacheStorage& cache, ThreadPool& pool,
                                   std::vector<float>& logits);

// b's data, grown to at least n floats (contents undefined). The forward's activation buffers are
// thread_local AlignedBuffers kept between calls through this, as large as the largest chunk
// so far: fresh zeroed vectors per layer and call cost ~8% of a 512-token prefill in page faults
// and zero fills.
inline float* grown(AlignedBuffer<float>& b, size_t n) {
  if (b.size() < n) b = AlignedBuffer<float>(n);
  return b.data();
}

// dst[0, n) = the FP32 values of elements [first, first + n) of a BF16 / F16 / F32 tensor whose
// data may be unaligned (embedding rows, norm weights).
void widen_elements(DType t, const uint8_t* data, int64_t first, int64_t n, float* dst);

// y[n, dim] = x · rsqrt(mean(x²) + eps) · w, in FP32 (the reference's RMSNorm at FP32
// activations). x and y may alias.
void rms_norm(const float* x, const float* w, int64_t n, int dim, float eps, int64_t x_stride,
              int64_t y_stride, float* y);

// The FFN of one layer for the rows of x [n, D] (already post-attention-normed): adds into
// out [n, D].
Status run_ffn(const Model::Impl& m, const LayerRuntime& L, int64_t n, const float* x, float* out,
               ThreadPool& pool);

}  // namespace mla
