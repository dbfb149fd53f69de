// write_tiny_checkpoint: config.json (tiny_config.cc) → ModelConfig → expected tensors (the same
// table the loader checks) → random BF16 / block-FP8 data → safetensors shards + index.json;
// tokenizer.json or tiktoken.model and tokenizer_config.json from tiny_tokenizer.cc. The shards
// are planned from the tensors' byte counts and each shard's data is made when it is written, so
// that --real-dims checkpoints larger than memory (DeepSeek-V3's layers, ~11 GB of FP8 experts
// each) hold one shard at a time.
#include "tiny/tiny_checkpoint.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/dtype.h"
#include "core/rng.h"
#include "io/safetensors.h"
#include "model/checkpoint.h"
#include "model/weight_layout.h"
#include "tiny/tiny_tokenizer.h"

namespace mla {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

uint64_t name_hash(std::string_view s) {  // FNV-1a: a stream per tensor, independent of order
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : s) h = (h ^ ch) * 0x100000001b3ull;
  return h;
}

struct Tensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

std::vector<uint8_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * 2);
  for (size_t k = 0; k < v.size(); ++k) {
    const uint16_t h = f32_to_bf16(v[k]);
    out[2 * k] = uint8_t(h), out[2 * k + 1] = uint8_t(h >> 8);
  }
  return out;
}
std::vector<uint8_t> to_f32(const std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * 4);
  std::memcpy(out.data(), v.data(), out.size());  // little-endian host (x86-64, aarch64)
  return out;
}

// How add_tensor stores e: F32 (router biases), BF16, or block-FP8 with an F32 scale grid.
DType stored_dtype(const ExpectedTensor& e, bool fp8) {
  if (e.role == WeightRole::kRouterBias) return DType::kF32;
  return fp8 && e.fp8_in_release ? DType::kF8E4M3 : DType::kBF16;
}

// The bytes add_tensor appends for e (its weight, and its scale grid when block-FP8): what the
// shards are planned from before their data is made.
uint64_t tensor_bytes(const ModelConfig& c, const ExpectedTensor& e, bool fp8) {
  uint64_t n = 1;
  for (int64_t d : e.shape) n *= uint64_t(d);
  const DType t = stored_dtype(e, fp8);
  if (t != DType::kF8E4M3) return n * uint64_t(dtype_bytes(t, 1));
  const std::vector<int64_t> grid = fp8_scale_shape(c, e.shape);
  return n + 4 * uint64_t(grid[0] * grid[1]);
}

// Appends the weight and, when FP8, its block scales: scale = amax(block) / 448, stored as
// weight_scale_inv because dequantisation multiplies by it (docs/MODELS.md §Safetensors and FP8).
void add_tensor(const ModelConfig& c, const ExpectedTensor& e, bool fp8, uint64_t seed,
                std::vector<Tensor>* out) {
  Rng rng(seed ^ name_hash(e.name));
  int64_t n = 1;
  for (int64_t d : e.shape) n *= d;
  std::vector<float> v(static_cast<size_t>(n));
  const bool embed_in =
      e.role == WeightRole::kEmbedding && e.name.find("embed_tokens") != std::string::npos;
  const double std_dev = e.role == WeightRole::kNorm || e.role == WeightRole::kRouterBias ? 0.01
                         : embed_in                                                       ? 1.0
                                    : 1.0 / std::sqrt(double(e.shape.back()));
  const double mean = e.role == WeightRole::kNorm ? 1.0 : 0.0;
  for (float& x : v) x = float(mean + std_dev * rng.normal());
  const DType stored = stored_dtype(e, fp8);
  if (stored != DType::kF8E4M3) {
    out->push_back({e.name, stored, e.shape, stored == DType::kF32 ? to_f32(v) : to_bf16(v)});
    return;
  }
  const int64_t rows = e.shape[0], cols = e.shape[1];
  const int64_t br = c.quantization.weight_block_size[0], bc = c.quantization.weight_block_size[1];
  const std::vector<int64_t> grid = fp8_scale_shape(c, e.shape);
  std::vector<float> scale(static_cast<size_t>(grid[0] * grid[1]));
  std::vector<uint8_t> q(static_cast<size_t>(n));
  for (int64_t bi = 0; bi < grid[0]; ++bi)
    for (int64_t bj = 0; bj < grid[1]; ++bj) {
      const int64_t r1 = std::min(rows, (bi + 1) * br), c1 = std::min(cols, (bj + 1) * bc);
      float amax = 0;
      for (int64_t i = bi * br; i < r1; ++i)
        for (int64_t j = bj * bc; j < c1; ++j) amax = std::max(amax, std::fabs(v[i * cols + j]));
      const float s = amax > 0 ? amax / kFp8E4M3Max : 1.0f;
      scale[bi * grid[1] + bj] = s;
      for (int64_t i = bi * br; i < r1; ++i)
        for (int64_t j = bj * bc; j < c1; ++j)
          q[i * cols + j] = f32_to_fp8_e4m3(v[i * cols + j] / s);
    }
  out->push_back({e.name, DType::kF8E4M3, e.shape, std::move(q)});
  out->push_back({fp8_scale_name(e.name), DType::kF32, grid, to_f32(scale)});
}

// A tensor of the checkpoint before its data is made (add_tensor, when its shard is written), or
// one made up front (K2's small inv_freq buffers).
struct PlannedTensor {
  ExpectedTensor e;
  bool fp8 = false;
  std::optional<Tensor> made;
  uint64_t bytes = 0;
};

Status write_text(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + fmt::format(".tmp.{}", ::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out.good()) return io_error(fmt::format("{}: cannot write", tmp.string()));
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec)
    return io_error(fmt::format("{}: cannot rename into place: {}", path.string(), ec.message()));
  return Status();
}

}  // namespace

Result<TinyCheckpointInfo> write_tiny_checkpoint(const TinyCheckpointOptions& o,
                                                 const std::string& out_dir) {
  MLA_ASSIGN_OR_RETURN(const std::string text, tiny_config_json(o));
  // Everything below follows from the config as our own parser reads it back, so the config and
  // the tensors cannot disagree.
  MLA_ASSIGN_OR_RETURN(ModelConfig c, parse_model_config(text, "make-tiny config.json"));
  const bool fp8 = c.quantization.quant_method == QuantMethod::kFp8;
  MLA_ASSIGN_OR_RETURN(const TinyTokenizerFiles tokenizer, tiny_tokenizer_files(o.family, c));

  std::vector<PlannedTensor> plan;
  for (const ExpectedTensor& e : expected_tensors(c))
    plan.push_back({e, fp8, std::nullopt, tensor_bytes(c, e, fp8)});
  for (const ExpectedTensor& e : mtp_tensors(c)) {
    const bool f = fp8 && e.fp8_in_release;
    plan.push_back({e, f, std::nullopt, tensor_bytes(c, e, f)});
  }
  if (c.model_type == "kimi_k2") {  // K2's unused buffers, inv_freq[k] = theta^(-2k/d_r)
    const int half = c.qk_rope_head_dim / 2;
    std::vector<float> inv(static_cast<size_t>(half));
    for (int k = 0; k < half; ++k)
      inv[size_t(k)] = float(std::pow(c.rope_theta, -2.0 * k / c.qk_rope_head_dim));
    for (int i = 0; i < c.num_hidden_layers; ++i) {
      Tensor t{fmt::format("model.layers.{}.self_attn.rotary_emb.inv_freq", i),
               DType::kBF16,
               {half},
               to_bf16(inv)};
      const uint64_t bytes = t.bytes.size();
      plan.push_back({{}, false, std::move(t), bytes});
    }
  }

  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return io_error(fmt::format("{}: cannot create directory: {}", out_dir, ec.message()));
  const fs::path dir(out_dir);
  MLA_RETURN_IF_ERROR(write_text(dir / "config.json", text));
  // One tokenizer file: a stale one of the other kind would win (tokenizer.json is read first).
  const char* tok_file = tokenizer.tiktoken_model.empty() ? "tokenizer.json" : "tiktoken.model";
  fs::remove(dir / (tokenizer.tiktoken_model.empty() ? "tiktoken.model" : "tokenizer.json"), ec);
  MLA_RETURN_IF_ERROR(write_text(dir / tok_file, tokenizer.tiktoken_model.empty()
                                                     ? tokenizer.tokenizer_json
                                                     : tokenizer.tiktoken_model));
  MLA_RETURN_IF_ERROR(write_text(dir / "tokenizer_config.json", tokenizer.tokenizer_config_json));

  TinyCheckpointInfo info;
  info.config = c;
  info.files = {"config.json", tok_file, "tokenizer_config.json"};
  uint64_t planned = 0;
  for (const PlannedTensor& t : plan) planned += t.bytes;

  // Consecutive runs of tensors of about equal bytes per shard (a block-FP8 weight and its scale
  // grid in the same one); each shard's data made, written and freed before the next.
  const int shards = std::min<int>(o.shards, int(plan.size()));
  std::vector<std::vector<size_t>> parts(static_cast<size_t>(shards));
  uint64_t before = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    const size_t s = std::min<size_t>(size_t(before * shards / planned), shards - 1);
    parts[s].push_back(i);
    before += plan[i].bytes;
  }
  Json weight_map = Json::object();
  for (int s = 0; s < shards; ++s) {
    const std::string file = shards == 1
                                 ? std::string(kSingleCheckpointFile)
                                 : fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, shards);
    std::vector<Tensor> tensors;
    for (size_t i : parts[s]) {
      PlannedTensor& t = plan[i];
      if (t.made)
        tensors.push_back(std::move(*t.made));
      else
        add_tensor(c, t.e, t.fp8, o.seed, &tensors);
    }
    std::vector<TensorToWrite> part;
    for (const Tensor& t : tensors)
      part.push_back({t.name, t.dtype, t.shape, t.bytes.data(), t.bytes.size()});
    MLA_RETURN_IF_ERROR(write_safetensors((dir / file).string(), part, {{"format", "pt"}}));
    for (const TensorToWrite& t : part) {
      weight_map[t.name] = file;
      info.tensor_bytes += t.byte_size;
    }
    info.tensors += int64_t(part.size());
    info.files.push_back(file);
  }
  const fs::path index = dir / kCheckpointIndexFile, single = dir / kSingleCheckpointFile;
  if (shards == 1) {
    fs::remove(index, ec);
  } else {
    fs::remove(single, ec);
    const Json j = {{"metadata", {{"total_size", info.tensor_bytes}}}, {"weight_map", weight_map}};
    MLA_RETURN_IF_ERROR(write_text(index, j.dump(2) + "\n"));
    info.files.push_back(kCheckpointIndexFile);
  }
  return info;
}

}  // namespace mla