// Tiny random checkpoints of each DeepSeek-family model (`mla make-tiny`): config.json with the
// family's Hugging Face keys and tiny dims, safetensors with the family's exact tensor names and
// dtypes (block-FP8 + weight_scale_inv like V3 / K2, an MTP layer for V3), for tests, oracles and
// the default model of scripts/run. A small byte-level BPE tokenizer comes with them
// (tiny_tokenizer.h). Not a converter: weights are random.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mla/status.h"
#include "model/model_config.h"

namespace mla {

enum class TinyWeights {
  kDefault,  // what the real checkpoint uses: FP8 for v3 and kimi-k2, BF16 otherwise
  kBF16,
  kFP8,  // linear decoder weights F8_E4M3 with F32 128×128 block scales; the rest as released
         // (docs/MODELS.md §Safetensors and FP8)
};

struct TinyCheckpointOptions {
  std::string family;  // one of tiny_family_names()
  TinyWeights weights = TinyWeights::kDefault;
  int layers = 0;     // decoder layers (1..kMaxTinyLayers); 0: the family's default
  uint64_t seed = 0;  // same options and seed → byte-identical files
  int shards = 2;     // 1: model.safetensors; 2..16: model.safetensors.index.json + shards
  // The released model's dims (model_preset: hidden size, heads, ranks, expert counts and
  // widths, vocabulary) instead of the tiny ones, with `layers` decoder layers: random weights of
  // the real shape for benchmarks (V2-Lite with 4 layers is ~3 GB in FP8). Not for CI.
  bool real_dims = false;
  // The family's multi-token-prediction layers (num_nextn_predict_layers: 1 for v3 and kimi-k2);
  // false writes none (a --real-dims V3 MTP layer is another ~11 GB MoE layer of FP8 experts).
  bool mtp = true;
};
inline constexpr int kMaxTinyLayers = 64;
inline constexpr int kMaxTinyShards = 16;

// "v2-lite", "v2", "v3", "kimi-k2", "moonlight".
std::span<const std::string_view> tiny_family_names();

// The config.json text make-tiny writes (sorted keys, like Hugging Face's save_pretrained).
// Dims: hidden 192, 4 heads, kv_lora_rank 48, qk_nope 16, qk_rope 8, v 16, intermediate 320,
// expert width 96, 8-12 experts, vocab 320, so FP8 weights have ragged 128-blocks (192 = 128+64,
// 320 = 2·128+64) and sub-block ones (56 = kv_lora_rank + qk_rope rows).
// Errors: invalid_argument for an unknown family or out-of-range layers / shards.
Result<std::string> tiny_config_json(const TinyCheckpointOptions& options);

struct TinyCheckpointInfo {
  ModelConfig config;
  std::vector<std::string> files;  // written, relative to the output directory
  int64_t tensors = 0;             // including scales and MTP tensors
  uint64_t tensor_bytes = 0;       // sum of tensor data bytes (the index's total_size)
};

// Creates `out_dir` if needed and writes config.json, tokenizer.json (tiktoken.model for the Kimi
// families), tokenizer_config.json (tiny/tiny_tokenizer.h) plus the weights there (each file
// replaced atomically). Removes a model.safetensors or index.json of the other layout left in
// `out_dir`, so the directory is never ambiguous. Weights: linear and router N(0, 1/fan_in),
// embed_tokens N(0, 1), norms 1 + N(0, 0.01), router bias N(0, 0.01) in F32; each tensor from its
// own stream seeded by (seed, name). Errors: invalid_argument (options), io_error (the OS refused).
Result<TinyCheckpointInfo> write_tiny_checkpoint(const TinyCheckpointOptions& options,
                                                 const std::string& out_dir);

}  // namespace mla
