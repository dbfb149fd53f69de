// Single-request generation over a Model: its own paged cache sized for the request, the prompt
// prefilled in chunks (each chunk's MLA path reported), then one token at a time. This is what
// `mla generate`, the oracle tests and benchmarks run; the serving engine batches many requests
// over one shared cache instead.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "mla/status.h"
#include "model/model_runtime.h"
#include "model/sampler.h"

namespace mla {

struct GenerateOptions {
  int max_new_tokens = 32;
  SamplingParams sampling;
  bool ignore_eos = false;   // keep going past the config's EOS ids
  int prefill_chunk = 2048;  // prompt tokens per forward call
  int page_size = 64;
  // Keep the logits of every prompt token and the residual stream after every layer for the
  // prompt (for --dump-activations); otherwise only the last token's logits are computed.
  bool keep_prompt_activations = false;
  bool keep_decode_logits = false;  // logits of every decode step
};

struct PrefillChunk {
  int64_t start = 0;
  int n_tokens = 0;
  MlaPath path = MlaPath::kAbsorbed;
  double seconds = 0;
};

struct GenerateResult {
  std::vector<int32_t> generated;
  std::string finish_reason;  // "stop" (an EOS id) or "length"
  std::vector<PrefillChunk> chunks;
  double prefill_seconds = 0, decode_seconds = 0;
  int decode_steps = 0;              // forward calls after the prompt
  int64_t kv_bytes_used = 0;         // pages held by the sequence at the end, all layers
  int64_t kv_bytes_per_token = 0;    // record bytes × layers
  std::vector<float> prompt_logits;  // [prompt, vocab] when kept
  std::vector<std::vector<float>> prompt_hidden;  // [layers][prompt, D] when kept
  std::vector<float> decode_logits;               // [decode_steps, vocab] when kept
};

// on_token (optional) is called with each generated id as soon as it is sampled. Errors:
// invalid_argument for an empty prompt, an id outside the vocabulary, a prompt + max_new_tokens
// longer than the model's context; those of forward.
Result<GenerateResult> generate(Model& model, std::span<const int32_t> prompt,
                                const GenerateOptions& options, ThreadPool& pool,
                                const std::function<void(int32_t)>& on_token = {});

}  // namespace mla
