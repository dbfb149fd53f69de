// `mla make-tiny`: writes a tiny random checkpoint of one DeepSeek family (tiny/tiny_checkpoint)
// and loads it back with the real loader before reporting success.
#include <fmt/format.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "model/model_weights.h"
#include "tiny/tiny_checkpoint.h"

namespace mla::cli {
namespace {

struct MakeTinyOptions {
  std::string family, out;
  bool fp8 = false, bf16 = false;
  int layers = 0;
  uint64_t seed = 0;
  int shards = 2;
  bool real_dims = false;
  bool no_mtp = false;
};

int run_make_tiny(const MakeTinyOptions& o) {
  TinyCheckpointOptions t;
  t.family = o.family;
  t.weights = o.fp8 ? TinyWeights::kFP8 : o.bf16 ? TinyWeights::kBF16 : TinyWeights::kDefault;
  t.layers = o.layers;
  t.seed = o.seed;
  t.shards = o.shards;
  t.real_dims = o.real_dims;
  t.mtp = !o.no_mtp;
  Result<TinyCheckpointInfo> info = write_tiny_checkpoint(t, o.out);
  if (!info.ok()) {
    fmt::print(stderr, "error: {}\n", info.status().message());
    return 1;
  }
  // The generator and the loader share the expected-tensor table; loading still proves the files,
  // the index and the config agree.
  Result<ModelWeights> w = load_model_weights(o.out);
  if (!w.ok()) {
    fmt::print(stderr, "error: the written checkpoint does not load: {}\n", w.status().message());
    return 1;
  }
  const ModelConfig& c = info->config;
  fmt::print(
      "wrote {}: {} ({}), {} layers{}, {} weights, {} tensors, {} bytes in {} safetensors "
      "file(s)\n",
      o.out, o.family, c.model_type, c.num_hidden_layers,
      c.num_nextn_predict_layers > 0 ? fmt::format(" + {} MTP", c.num_nextn_predict_layers) : "",
      c.quantization.quant_method == QuantMethod::kFp8 ? "FP8 E4M3 (128x128 block scales)" : "BF16",
      info->tensors, info->tensor_bytes, w->checkpoint.shards().size());
  return 0;
}

void register_make_tiny(CLI::App& app, int* exit_code) {
  auto opts = std::make_shared<MakeTinyOptions>();
  CLI::App* cmd = app.add_subcommand(
      "make-tiny", "Write a tiny random checkpoint with a model family's exact names and shapes");
  std::vector<std::string> families(tiny_family_names().begin(), tiny_family_names().end());
  cmd->add_option("--family", opts->family, "Model family")
      ->required()
      ->check(CLI::IsMember(families));
  cmd->add_option("--out", opts->out, "Output directory (created if missing)")->required();
  CLI::Option* fp8 = cmd->add_flag(
      "--fp8", opts->fp8, "FP8 E4M3 weights with weight_scale_inv (default for v3, kimi-k2)");
  CLI::Option* bf16 = cmd->add_flag("--bf16", opts->bf16, "BF16 weights (default for the others)");
  fp8->excludes(bf16);
  cmd->add_option("--layers", opts->layers, "Decoder layers (default: the family's, 3-4)")
      ->check(CLI::Range(1, kMaxTinyLayers));
  cmd->add_option("--seed", opts->seed, "Random seed (default 0)");
  cmd->add_option("--shards", opts->shards,
                  "Safetensors files; 1 writes model.safetensors without an index (default 2)")
      ->check(CLI::Range(1, kMaxTinyShards));
  cmd->add_flag("--real-dims", opts->real_dims,
                "The released model's dims with --layers layers (GBs: for benchmarks)");
  cmd->add_flag("--no-mtp", opts->no_mtp,
                "Without the multi-token-prediction layer (v3, kimi-k2: a --real-dims MoE layer "
                "less on disk)");
  cmd->callback([opts, exit_code] { *exit_code = run_make_tiny(*opts); });
}

}  // namespace

MLA_REGISTER_COMMAND("make-tiny", register_make_tiny);

}  // namespace mla::cli
