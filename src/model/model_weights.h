// ModelWeights: a model directory loaded for inference: its ModelConfig, its mapped Checkpoint,
// and every tensor the config implies, checked (name, shape, dtype, FP8 block scales) and laid
// out per layer for the forward pass. Weights stay in their file dtype (FP8 stays FP8); nothing
// here converts or copies tensor data.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "kernels/linear.h"
#include "mla/status.h"
#include "model/checkpoint.h"
#include "model/model_config.h"

namespace mla {

// One validated weight. `weight` points into a shard's mapping (unaligned: see TensorInfo).
struct WeightRef {
  const TensorInfo* weight = nullptr;  // [out, in] or [n]: BF16, F16, F32 or F8_E4M3
  // F8_E4M3 weights only: [ceil(out/128), ceil(in/128)] F32; W_real[i][j] = W[i][j] ·
  // scale_inv[i/128][j/128], a multiplication (docs/MODELS.md §Safetensors and FP8).
  const TensorInfo* scale_inv = nullptr;
  bool present() const { return weight != nullptr; }
  bool fp8() const { return scale_inv != nullptr; }
};

struct MlpWeights {     // SwiGLU: down(silu(gate(x)) ⊙ up(x))
  WeightRef gate_proj;  // [width, D]
  WeightRef up_proj;    // [width, D]
  WeightRef down_proj;  // [D, width]
};

struct LayerWeights {
  WeightRef input_layernorm;  // [D]
  // Query path: q_proj when q_lora_rank is 0, else q_a_proj → q_a_layernorm → q_b_proj.
  WeightRef q_proj;                    // [H*(d_n+d_r), D]
  WeightRef q_a_proj;                  // [r_q, D]
  WeightRef q_a_layernorm;             // [r_q]
  WeightRef q_b_proj;                  // [H*(d_n+d_r), r_q]
  WeightRef kv_a_proj_with_mqa;        // [r+d_r, D]: latent rows first, then k_pe
  WeightRef kv_a_layernorm;            // [r]
  WeightRef kv_b_proj;                 // [H*(d_n+d_v), r]: per head k_nope rows, then v rows
  WeightRef o_proj;                    // [D, H*d_v]
  WeightRef post_attention_layernorm;  // [D]
  bool moe = false;
  MlpWeights mlp;                   // dense layers: width I
  WeightRef router;                 // MoE: mlp.gate.weight [E, D]
  WeightRef router_bias;            // MoE with noaux_tc: e_score_correction_bias [E]
  std::vector<MlpWeights> experts;  // MoE: E experts of width I_e
  MlpWeights shared_experts;        // MoE with n_shared_experts > 0: width S*I_e
};

struct ModelWeights {
  ModelConfig config;
  Checkpoint checkpoint;             // owns the mappings every TensorInfo points into
  WeightRef embed_tokens;            // [vocab, D]
  std::vector<LayerWeights> layers;  // num_hidden_layers; MTP layers are not loaded
  WeightRef norm;                    // [D]
  WeightRef lm_head;                 // [vocab, D]; the embed_tokens tensor when tie_word_embeddings
  // Tensors in the files that inference does not read: MTP layers (index >= num_hidden_layers,
  // below num_hidden_layers + num_nextn_predict_layers) and rotary_emb.inv_freq buffers (K2).
  int64_t skipped_tensors = 0;
};

// A bound matrix [out, in] as the weight products take it (kernels/linear.h): the mapped bytes,
// and for F8_E4M3 its scale grid with the config's block size. Empty (data null) when absent.
LinearWeight linear_of(const WeightRef& w, const ModelConfig& c);

// Loads `dir`: config.json (load_model_config), the checkpoint (Checkpoint::open), then checks
// every expected tensor (weight_layout.h) is present with its exact shape and a dtype of BF16,
// F16, F32, or F8_E4M3 for linear weights, with `<name>_scale_inv` F32 of the block-grid shape.
//
// Unknown tensors are an ERROR, not a warning: a tensor the config does not explain (a layer past
// num_hidden_layers that is not an MTP layer, an attention bias, a scale on a BF16 weight) means
// config.json does not describe the files, and running anyway would silently compute another
// model. Only the MTP layers and rotary_emb.inv_freq buffers are skipped.
//
// Errors: one line naming the file, the tensor, the expected and actual values, e.g.
//   DIR/model-00001-of-00002.safetensors: tensor "model.layers.0.self_attn.kv_b_proj.weight"
//   has shape [96, 32], expected [128, 32] = [H*(d_n+d_v), r]
// not_found for a missing tensor, invalid_argument for shape/dtype/unknown tensors, plus those of
// load_model_config and Checkpoint::open. Nothing is allocated in proportion to the config's
// sizes before the config is checked against the number of tensors the files actually hold.
Result<ModelWeights> load_model_weights(const std::string& dir,
                                        const CheckpointOptions& options = {});

// The same checks on an already opened checkpoint (used by load_model_weights and tests).
Result<ModelWeights> bind_model_weights(ModelConfig config, Checkpoint checkpoint);

}  // namespace mla
