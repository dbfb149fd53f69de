// `mla memory`: KV cache bytes of a model for MHA, GQA-8 and each MLA cache format, as a table or
// JSON. Arithmetic lives in cache/memory_estimate; this file only gathers the inputs and prints.
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cache/cache_capacity.h"
#include "cache/memory_estimate.h"
#include "commands.h"
#include "model/gguf_checkpoint.h"
#include "model/model_config.h"

namespace mla::cli {
namespace {

constexpr int64_t kDefaultContext = 65536;
constexpr const char* kDefaultPreset = "v3";

struct MemoryOptions {
  std::string model;
  std::string preset;
  int64_t context = kDefaultContext;
  int64_t batch = 1;
  int64_t layers = 0;  // 0: the model's num_hidden_layers
  int64_t page_size = 64;
  bool json = false;
  std::string kv_dtype;            // the engine's cache format, reported on its own as well
  uint64_t kv_cache_bytes = 0;     // a KV budget: how much fits in it
  double kv_cache_fraction = 0.0;  // or this fraction of MemAvailable
};

// What a KV budget holds in one cache format: pages of page_size tokens in every layer.
struct CapacityRow {
  std::string kv_dtype;
  int64_t blocks = 0, tokens = 0, sequences = 0;  // sequences of --context tokens
};

// 1234567 → "1,234,567".
std::string grouped(int64_t v) {
  std::string digits = fmt::format("{}", v < 0 ? -v : v);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return v < 0 ? "-" + out : out;
}

// Bytes in the largest unit of `units` (steps of `base`) that keeps the value >= 1, with at most
// two decimals and no trailing zeros: 4123168604160 → "3.75 TiB" (base 1024) or "4.12 TB".
std::string scaled(int64_t bytes, double base, const char* const (&units)[7]) {
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= base && u < 6) {
    v /= base;
    ++u;
  }
  if (u == 0) return fmt::format("{} B", bytes);
  std::string s = fmt::format("{:.2f}", v);
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s + " " + units[u];
}
constexpr const char* kBinaryUnits[7] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
constexpr const char* kDecimalUnits[7] = {"B", "kB", "MB", "GB", "TB", "PB", "EB"};
std::string binary_units(int64_t bytes) {
  return scaled(bytes, 1024.0, kBinaryUnits);
}
std::string decimal_units(int64_t bytes) {
  return "(" + scaled(bytes, 1000.0, kDecimalUnits) + ")";
}

void print_table(const std::string& source, const ModelConfig& m, const KvMemoryEstimate& est) {
  const KvMemoryQuery& q = est.query;
  fmt::print(
      "KV cache memory of {} ({}): {} layers, context {} tokens, batch {} ({} token slots), "
      "page size {}\n",
      source, m.model_type.empty() ? "unnamed" : m.model_type, q.dims.num_layers,
      grouped(q.context), grouped(q.batch), grouped(est.token_slots), q.page_size);
  fmt::print(
      "MHA: K and V of {} heads x {} dims (v_head_dim) in BF16; GQA-{}: the same with {} KV "
      "heads.\n"
      "MLA: one latent of kv_lora_rank {} + qk_rope_head_dim {} values per token, shared by all "
      "heads.\nSizes in binary units (GiB = 2^30 bytes), then decimal (GB = 10^9 bytes).\n\n",
      q.dims.num_heads, q.dims.head_dim, kGqaKvHeads, std::min(kGqaKvHeads, q.dims.num_heads),
      q.dims.kv_lora_rank, q.dims.qk_rope_head_dim);

  std::vector<std::vector<std::string>> rows = {{"layout", "bytes/token/layer", "per sequence", "",
                                                 "total", "", "pages/seq", "page bytes",
                                                 "saved vs MHA"}};
  for (const KvLayoutEstimate& e : est.layouts)
    rows.push_back({e.label, grouped(e.bytes_per_token_layer), binary_units(e.bytes_per_sequence),
                    decimal_units(e.bytes_per_sequence), binary_units(e.total_bytes),
                    decimal_units(e.total_bytes), grouped(e.pages_per_sequence),
                    grouped(e.page_bytes), fmt::format("{:.2f}%", e.saved_vs_mha_percent)});
  std::vector<size_t> width(rows[0].size(), 0);
  for (const auto& row : rows)
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  for (const auto& row : rows) {
    std::string line = fmt::format("{:<{}}", row[0], width[0]);
    for (size_t i = 1; i < row.size(); ++i)
      line += (rows[0][i].empty() ? " " : "  ") + fmt::format("{:>{}}", row[i], width[i]);
    fmt::print("{}\n", line);
  }
  fmt::print(
      "\npages/seq: block-table entries per sequence; each layer holds one page of "
      "`page bytes` per entry.\n");
}

// The estimate of the MLA layout in `kv_dtype` ("mla_<name>").
const KvLayoutEstimate* selected_layout(const KvMemoryEstimate& est, const std::string& kv_dtype) {
  for (const KvLayoutEstimate& e : est.layouts)
    if (e.name == "mla_" + kv_dtype) return &e;
  return nullptr;
}

void print_json(const std::string& source, const ModelConfig& m, const KvMemoryEstimate& est,
                const std::string& kv_dtype, uint64_t budget, const std::vector<CapacityRow>& cap) {
  const KvMemoryQuery& q = est.query;
  nlohmann::ordered_json layouts = nlohmann::ordered_json::array();
  for (const KvLayoutEstimate& e : est.layouts)
    layouts.push_back({{"name", e.name},
                       {"label", e.label},
                       {"bytes_per_token_layer", e.bytes_per_token_layer},
                       {"bytes_per_sequence", e.bytes_per_sequence},
                       {"total_bytes", e.total_bytes},
                       {"total_gib", bytes_to_gib(e.total_bytes)},
                       {"total_gb", bytes_to_gb(e.total_bytes)},
                       {"pages_per_sequence", e.pages_per_sequence},
                       {"page_bytes", e.page_bytes},
                       {"paged_bytes_per_sequence", e.paged_bytes_per_sequence},
                       {"saved_vs_mha_percent", e.saved_vs_mha_percent}});
  const nlohmann::ordered_json out = {{"source", source},
                                      {"model",
                                       {{"model_type", m.model_type},
                                        {"num_hidden_layers", m.num_hidden_layers},
                                        {"num_attention_heads", m.num_attention_heads},
                                        {"v_head_dim", m.v_head_dim},
                                        {"kv_lora_rank", m.kv_lora_rank},
                                        {"qk_rope_head_dim", m.qk_rope_head_dim}}},
                                      {"context", q.context},
                                      {"batch", q.batch},
                                      {"layers", q.dims.num_layers},
                                      {"page_size", q.page_size},
                                      {"token_slots", est.token_slots},
                                      {"layouts", std::move(layouts)}};
  nlohmann::ordered_json doc = out;
  if (const KvLayoutEstimate* e = selected_layout(est, kv_dtype)) {
    doc["kv_dtype"] = kv_dtype;
    doc["bytes_per_token_layer"] = e->bytes_per_token_layer;
    doc["bytes_per_sequence"] = e->bytes_per_sequence;
    doc["total_bytes"] = e->total_bytes;
  }
  if (budget > 0) {
    doc["kv_cache_bytes"] = budget;
    nlohmann::ordered_json rows = nlohmann::ordered_json::array();
    for (const CapacityRow& c : cap)
      rows.push_back({{"kv_dtype", c.kv_dtype},
                      {"blocks", c.blocks},
                      {"tokens", c.tokens},
                      {"sequences", c.sequences}});
    doc["capacity"] = std::move(rows);
  }
  fmt::print("{}\n", doc.dump(2));
}

int run_memory(const MemoryOptions& o) {
  auto fail = [](const Status& s) {
    fmt::print(stderr, "error: {}\n", s.message());
    return 1;
  };
  const std::string preset = o.preset.empty() ? kDefaultPreset : o.preset;
  Result<ModelConfig> config = o.model.empty()         ? model_preset(preset)
                               : is_gguf_path(o.model) ? gguf_model_config(o.model)
                                                       : load_model_config(o.model);
  if (!config.ok()) return fail(config.status());
  const ModelConfig& m = *config;

  KvMemoryQuery q;
  q.dims.num_layers =
      static_cast<int>(o.layers > 0 ? std::min<int64_t>(o.layers, INT32_MAX) : m.num_hidden_layers);
  q.dims.num_heads = m.num_attention_heads;
  q.dims.head_dim = m.v_head_dim;
  q.dims.kv_lora_rank = m.kv_lora_rank;
  q.dims.qk_rope_head_dim = m.qk_rope_head_dim;
  q.context = o.context;
  q.batch = o.batch;
  q.page_size = o.page_size;
  Result<KvMemoryEstimate> est = estimate_kv_memory(q);
  if (!est.ok()) return fail(est.status());

  // Capacity of a budget, per MLA format (or the selected one).
  std::vector<CapacityRow> capacity;
  uint64_t budget = o.kv_cache_bytes;
  if (o.kv_cache_fraction > 0) {
    Result<uint64_t> b = budget_from_available_fraction(o.kv_cache_fraction);
    if (!b.ok()) return fail(b.status());
    budget = *b;
  }
  if (budget > 0) {
    for (KvCacheDtype d : kAllKvCacheDtypes) {
      const std::string name(kv_cache_dtype_name(d));
      if (!o.kv_dtype.empty() && name != o.kv_dtype) continue;
      const int64_t rec = kv_bytes_per_token(d, m.kv_lora_rank, m.qk_rope_head_dim);
      Result<int32_t> blocks =
          num_blocks_for_budget(budget, rec, q.dims.num_layers, int(o.page_size));
      if (!blocks.ok()) return fail(blocks.status());
      const int64_t pages_per_seq = (o.context + o.page_size - 1) / o.page_size;
      capacity.push_back({name, *blocks, int64_t(*blocks) * o.page_size, *blocks / pages_per_seq});
    }
  }

  const std::string source = o.model.empty() ? "preset " + preset : o.model;
  if (o.json) {
    print_json(source, m, *est, o.kv_dtype, budget, capacity);
  } else {
    print_table(source, m, *est);
    if (const KvLayoutEstimate* e = selected_layout(*est, o.kv_dtype))
      fmt::print("\nkv_dtype {}: {} bytes per token and layer, {} per sequence, {} in all.\n",
                 o.kv_dtype, grouped(e->bytes_per_token_layer), binary_units(e->bytes_per_sequence),
                 binary_units(e->total_bytes));
    if (!capacity.empty()) {
      fmt::print("\nA KV budget of {} ({} bytes) holds, with {} layers and pages of {} tokens:\n",
                 binary_units(int64_t(budget)), grouped(int64_t(budget)), q.dims.num_layers,
                 o.page_size);
      for (const CapacityRow& c : capacity)
        fmt::print("  {:<9} {:>12} pages  {:>14} tokens  {:>8} sequences of {} tokens\n",
                   c.kv_dtype, grouped(c.blocks), grouped(c.tokens), grouped(c.sequences),
                   grouped(o.context));
    }
  }
  std::fflush(stdout);
  return 0;
}

// Checks the flag's text before CLI11 converts it, so an out-of-range value is named as typed
// (CLI11 would saturate 10^20 to INT64_MAX first).
CLI::Validator positive_int(int64_t max) {
  return CLI::Validator(
      [max](std::string& text) -> std::string {
        int64_t v = 0;
        const char* end = text.data() + text.size();
        const auto [ptr, ec] = std::from_chars(text.data(), end, v);
        if (ec != std::errc() || ptr != end || v < 1 || v > max)
          return fmt::format("must be an integer in [1, {}], got {}", max, text);
        return std::string();
      },
      max == INT64_MAX ? std::string("POSITIVE") : fmt::format("[1, {}]", max));
}

}  // namespace

void register_memory(CLI::App& app, int* exit_code) {
  auto opts = std::make_shared<MemoryOptions>();
  CLI::App* cmd = app.add_subcommand(
      "memory", "KV cache memory per layout (MHA, GQA-8, MLA bf16/fp8_e4m3/int8/nvfp4)");
  std::vector<std::string> presets;
  for (std::string_view n : model_preset_names()) presets.emplace_back(n);

  CLI::Option* model =
      cmd->add_option("--model", opts->model,
                      "Model directory, its config.json or a .gguf file (excludes --preset)");
  CLI::Option* preset =
      cmd->add_option("--preset", opts->preset,
                      fmt::format("Built-in model config (default {})", kDefaultPreset))
          ->check(CLI::IsMember(presets));
  model->excludes(preset);
  cmd->add_option("--context", opts->context,
                  fmt::format("Tokens per sequence (default {})", kDefaultContext))
      ->check(positive_int(INT64_MAX));
  cmd->add_option("--batch", opts->batch, "Sequences held at once (default 1)")
      ->check(positive_int(INT64_MAX));
  cmd->add_option("--layers", opts->layers,
                  "Layers with a KV cache (default: the model's num_hidden_layers)")
      ->check(positive_int(kMaxKvMemoryDim));
  cmd->add_option("--page-size", opts->page_size, "Tokens per cache page (default 64)")
      ->check(positive_int(kMaxKvMemoryDim));
  std::vector<std::string> formats;
  for (KvCacheDtype d : kAllKvCacheDtypes) formats.emplace_back(kv_cache_dtype_name(d));
  cmd->add_option(
         "--kv-dtype", opts->kv_dtype,
         "Cache format to report on its own (all are in the table): bf16, fp8_e4m3, int8, nvfp4")
      ->check(CLI::IsMember(formats));
  CLI::Option* bytes = cmd->add_option(
      "--kv-cache-bytes", opts->kv_cache_bytes,
      "A KV cache budget in bytes: report the pages, tokens and sequences it holds");
  CLI::Option* fraction = cmd->add_option("--kv-cache-fraction", opts->kv_cache_fraction,
                                          "The budget as a fraction of MemAvailable (0, 1]")
                              ->check(CLI::Range(1e-9, 1.0));
  bytes->excludes(fraction);
  cmd->add_flag("--json", opts->json, "Print one JSON object instead of the table");
  cmd->callback([opts, exit_code] { *exit_code = run_memory(*opts); });
}

MLA_REGISTER_COMMAND("memory", register_memory);

}  // namespace mla::cli
