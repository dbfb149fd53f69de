// `mla quantize`: a Hugging Face checkpoint directory → a GGUF file (model/gguf_export.h).
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>

#include "commands.h"
#include "model/gguf_export.h"

namespace mla::cli {
namespace {

struct QuantizeCliOptions {
  std::string model, out, type = "q8_0";
};

int run_quantize(const QuantizeCliOptions& o) {
  QuantizeOptions q;
  q.type = o.type;
  const bool tty = ::isatty(2);
  const auto start = std::chrono::steady_clock::now();
  q.progress = [tty, start](int64_t done, int64_t total, uint64_t bytes) {
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (tty)
      fmt::print(stderr, "\r[{:>3}%] {}/{} tensors, {:.2f} GiB written, {:.0f} s",
                 100 * done / total, done, total, bytes / double(1 << 30), s);
    else if (done == total || done % std::max<int64_t>(1, total / 10) == 0)
      fmt::print(stderr, "{}/{} tensors, {:.2f} GiB written, {:.0f} s\n", done, total,
                 bytes / double(1 << 30), s);
  };
  Result<QuantizeReport> r = quantize_model(o.model, o.out, q);
  if (tty) fmt::print(stderr, "\n");
  if (!r.ok()) {
    fmt::print(stderr, "error: {}\n", r.status().message());
    return 1;
  }
  std::string types;
  for (const auto& [t, n] : r->types)
    types += fmt::format("{}{} {}", types.empty() ? "" : ", ", n, t);
  fmt::print("wrote {}: {} tensors ({}), {} bytes\n", o.out, r->tensors, types, r->file_bytes);
  return 0;
}

void register_quantize(CLI::App& app, int* exit_code) {
  auto opts = std::make_shared<QuantizeCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "quantize", "Write a Hugging Face checkpoint as a GGUF file with quantised weights");
  cmd->add_option("-m,--model", opts->model, "Model directory (config.json + safetensors)")
      ->required();
  cmd->add_option("--out", opts->out, "Output .gguf file")->required();
  cmd->add_option("--type", opts->type, "File type (docs/GGUF.md)")
      ->check(CLI::IsMember(gguf_file_types()));
  cmd->callback([opts, exit_code] { *exit_code = run_quantize(*opts); });
}

}  // namespace

MLA_REGISTER_COMMAND("quantize", register_quantize);

}  // namespace mla::cli
