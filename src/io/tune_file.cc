// Reading and writing the tuning file (JSON).
#include "io/tune_file.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/json_limits.h"

namespace mla {
namespace {

// The file holds two short fields; anything much larger is not a tuning file.
constexpr size_t kMaxTuneFileBytes = 64 << 10;

}  // namespace

std::string tune_file_path() {
  if (const char* p = std::getenv("MLA_TUNE_FILE"); p && *p) return p;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
    return std::string(x) + "/mla/tune.json";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/mla/tune.json";
  return ".mla-tune.json";
}

Result<TuneData> read_tune_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return not_found(path + ": no tuning file");
  // Read at most one byte past kMaxTuneFileBytes, then refuse (no unbounded read of a stray file).
  std::string text(kMaxTuneFileBytes + 1, '\0');
  in.read(text.data(), std::streamsize(text.size()));
  text.resize(size_t(in.gcount()));
  if (text.size() > kMaxTuneFileBytes)
    return data_loss(path + ": larger than " + std::to_string(kMaxTuneFileBytes) + " bytes");
  if (json_depth_exceeded(text)) return data_loss(path + ": JSON nests too deeply");
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return data_loss(path + ": not a JSON object");
  TuneData d;
  auto it = j.find("prefill_absorption_threshold");
  if (it == j.end() || !it->is_number_integer() || it->get<int64_t>() < 0 ||
      it->get<int64_t>() > (1 << 24))
    return data_loss(path +
                     ": field \"prefill_absorption_threshold\" must be an integer in [0, 2^24]");
  d.prefill_absorption_threshold = int(it->get<int64_t>());
  if (auto b = j.find("prefill_absorption_threshold_bf16"); b != j.end()) {
    if (!b->is_number_integer() || b->get<int64_t>() < 0 || b->get<int64_t>() > (1 << 24))
      return data_loss(
          path + ": field \"prefill_absorption_threshold_bf16\" must be an integer in [0, 2^24]");
    d.prefill_absorption_threshold_bf16 = int(b->get<int64_t>());
  }
  if (auto m = j.find("measured_on"); m != j.end() && m->is_string())
    d.measured_on = m->get<std::string>();
  return d;
}

Status write_tune_file(const std::string& path, const TuneData& data) {
  std::error_code ec;
  const std::filesystem::path p(path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  if (ec) return io_error(path + ": cannot create its directory: " + ec.message());
  nlohmann::json j = {{"prefill_absorption_threshold", data.prefill_absorption_threshold},
                      {"measured_on", data.measured_on}};
  if (data.prefill_absorption_threshold_bf16 >= 0)
    j["prefill_absorption_threshold_bf16"] = data.prefill_absorption_threshold_bf16;
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) return io_error(tmp + ": cannot write");
    out << j.dump(2) << "\n";
    if (!out.flush()) return io_error(tmp + ": write failed");
  }
  std::filesystem::rename(tmp, p, ec);
  if (ec) return io_error(path + ": cannot rename the temporary file: " + ec.message());
  return {};
}

std::optional<int> tuned_prefill_absorption_threshold(DType attention) {
  static const std::optional<TuneData> data = []() -> std::optional<TuneData> {
    auto d = read_tune_file(tune_file_path());
    if (!d.ok()) return std::nullopt;
    return *d;
  }();
  if (!data) return std::nullopt;
  if (attention == DType::kBF16 && data->prefill_absorption_threshold_bf16 >= 0)
    return data->prefill_absorption_threshold_bf16;
  return data->prefill_absorption_threshold;
}

}  // namespace mla
