// The prompts of `mla bench serve` (bench_serve_dataset.h).
#include "bench_serve_dataset.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

namespace mla::cli {

Result<std::vector<BenchPrompt>> random_prompts(int n, int input_len, int output_len, int low,
                                                int high, uint64_t seed,
                                                const tok::LoadedTokenizer* tk) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> id(low, high - 1);
  std::vector<BenchPrompt> out(static_cast<size_t>(n));
  for (BenchPrompt& p : out) {
    p.ids.resize(size_t(input_len));
    for (int32_t& t : p.ids) t = id(rng);
    p.input_len = input_len;
    p.output_len = output_len;
    if (!tk) continue;
    MLA_ASSIGN_OR_RETURN(p.text, tk->tokenizer.decode(p.ids));
    MLA_ASSIGN_OR_RETURN(std::vector<int32_t> again, tk->tokenizer.encode(p.text));
    p.input_len = int64_t(again.size());
    p.ids.clear();
  }
  return out;
}

Result<std::vector<BenchPrompt>> sharegpt_prompts(const std::string& path, int n, int output_len,
                                                  uint64_t seed, const tok::LoadedTokenizer& tk) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return not_found(fmt::format("{}: cannot open the dataset", path));
  std::stringstream ss;
  ss << f.rdbuf();
  const auto j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_array())
    return invalid_argument(
        fmt::format("{}: not a ShareGPT file (a JSON list of conversations)", path));
  std::vector<std::pair<std::string, std::string>> turns;  // (prompt, reply)
  for (const auto& e : j) {
    if (!e.is_object() || !e.contains("conversations") || !e["conversations"].is_array()) continue;
    const auto& c = e["conversations"];
    if (c.size() < 2 || !c[0].is_object() || !c[1].is_object() || !c[0].contains("value") ||
        !c[1].contains("value") || !c[0]["value"].is_string() || !c[1]["value"].is_string())
      continue;
    turns.emplace_back(c[0]["value"].get<std::string>(), c[1]["value"].get<std::string>());
  }
  std::shuffle(turns.begin(), turns.end(), std::mt19937_64(seed));
  std::vector<BenchPrompt> out;
  for (const auto& [prompt, reply] : turns) {
    if (int(out.size()) == n) break;
    MLA_ASSIGN_OR_RETURN(std::vector<int32_t> p, tk.tokenizer.encode(prompt));
    int64_t want = output_len;
    if (want <= 0) {
      MLA_ASSIGN_OR_RETURN(std::vector<int32_t> r, tk.tokenizer.encode(reply));
      want = int64_t(r.size());
      if (want < 4) continue;
    }
    const int64_t len = int64_t(p.size());
    if (len < 4 || len > 1024 || len + want > 2048) continue;
    out.push_back({{}, prompt, len, int(want)});
  }
  if (out.empty())
    return invalid_argument(fmt::format(
        "{}: no conversation fits (two turns, 4-1,024 prompt tokens, 2,048 in all)", path));
  return out;
}

}  // namespace mla::cli
