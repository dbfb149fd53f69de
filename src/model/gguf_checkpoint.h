// A GGUF model file of llama.cpp's `deepseek2` architecture (DeepSeek-V2 / V2-Lite / V3 / R1,
// Kimi-K2, Moonlight) read as what the rest of the loader expects of a Hugging Face directory:
// a ModelConfig built from the GGUF metadata, and a Checkpoint whose tensors carry the Hugging
// Face names (docs/GGUF.md "The deepseek2 architecture"). Weights stay in their GGUF types and in
// the mapping; only two things are made at load: the per-expert views of the merged expert
// tensors (no copy) and kv_b_proj, rebuilt in FP32 from the split attn_k_b / attn_v_b that newer
// converters write (it is read once, at load, to make the absorbed weights).
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "io/gguf.h"
#include "mla/status.h"
#include "model/checkpoint.h"
#include "model/model_config.h"

namespace mla {

// Whether `path` names a GGUF file (ends in ".gguf"): the CLI's -m takes either a model directory
// or such a file.
bool is_gguf_path(std::string_view path);

// config.json as the metadata of `f` implies it (arch "deepseek2" only; another architecture or
// a missing key is invalid_argument naming the key). `tensors` decides what the metadata cannot
// say: tied embeddings (no output.weight), the routing method (exp_probs_b present: noaux_tc).
Result<nlohmann::json> gguf_config_json(const GgufFile& f, const GgufSet& tensors);

struct GgufModel {
  ModelConfig config;
  Checkpoint checkpoint;
};

// Opens `path` (a .gguf file or any member of a split set), derives the config and renames every
// tensor (unknown GGUF names are kept as they are, so that bind_model_weights reports them).
// Errors as GgufSet::open and parse_model_config, plus invalid_argument for expert or k_b / v_b
// tensors whose shapes do not match the config, naming the tensor.
Result<GgufModel> open_gguf_model(const std::string& path);

// Only the config (`mla memory -m FILE.gguf`): nothing is rebuilt.
Result<ModelConfig> gguf_model_config(const std::string& path);

}  // namespace mla
