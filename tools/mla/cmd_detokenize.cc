// `mla detokenize`: token ids back to text (the ByteLevel decoder; ill-formed UTF-8 becomes
// U+FFFD), or with --stream one line per id showing what a streaming client would receive.
#include <charconv>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer_config.h"

namespace mla::cli {
namespace {

struct DetokenizeOptions {
  std::string model;
  std::string tokenizer;
  std::string ids;
  bool skip_special = false;
  bool stream = false;
  bool json = false;
};

int fail(const Status& s) {
  fmt::print(stderr, "error: {}\n", s.message());
  return 1;
}

// "1,2, 3" → {1, 2, 3}; anything else is an error naming the item.
Result<std::vector<int32_t>> parse_ids(const std::string& s) {
  std::vector<int32_t> ids;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t end = s.find(',', pos);
    if (end == std::string::npos) end = s.size();
    size_t b = pos, e = end;
    while (b < e && s[b] == ' ') ++b;
    while (e > b && s[e - 1] == ' ') --e;
    int32_t v = 0;
    const auto [ptr, ec] = std::from_chars(s.data() + b, s.data() + e, v);
    if (b == e || ec != std::errc() || ptr != s.data() + e)
      return invalid_argument(fmt::format("--ids: item {} is \"{}\", not an integer id", ids.size(),
                                          s.substr(b, e - b)));
    ids.push_back(v);
    pos = end + 1;
  }
  return ids;
}

int run_detokenize(const DetokenizeOptions& o) {
  Result<tok::LoadedTokenizer> lt = tok::load_tokenizer(o.model, o.tokenizer);
  if (!lt.ok()) return fail(lt.status());
  Result<std::vector<int32_t>> ids = parse_ids(o.ids);
  if (!ids.ok()) return fail(ids.status());
  tok::DecodeOptions d;
  d.skip_special = o.skip_special;
  if (o.stream) {
    tok::StreamDecoder sd(lt->tokenizer, d);
    nlohmann::json chunks = nlohmann::json::array();
    for (int32_t id : *ids) {
      Result<std::string> piece = sd.push(id);
      if (!piece.ok()) return fail(piece.status());
      chunks.push_back(*piece);
    }
    chunks.push_back(sd.finish());
    for (const auto& c : chunks) fmt::print("{}\n", c.dump());
    return 0;
  }
  Result<std::string> text = lt->tokenizer.decode(*ids, d);
  if (!text.ok()) return fail(text.status());
  if (o.json)
    fmt::print("{}\n", nlohmann::json({{"text", *text}}).dump());
  else
    fmt::print("{}\n", *text);
  std::fflush(stdout);
  return 0;
}

}  // namespace

void register_detokenize(CLI::App& app, int* exit_code) {
  auto opts = std::make_shared<DetokenizeOptions>();
  CLI::App* cmd = app.add_subcommand("detokenize", "Token ids to text");
  CLI::Option* m = cmd->add_option("-m,--model", opts->model, "Model directory");
  CLI::Option* t = cmd->add_option("--tokenizer", opts->tokenizer, "A tokenizer.json file");
  m->excludes(t);
  cmd->add_option("--ids", opts->ids, "Comma-separated ids, e.g. 19923,3")->required();
  cmd->add_flag("--skip-special", opts->skip_special, "Leave out special tokens");
  cmd->add_flag("--stream", opts->stream,
                "Decode id by id; print each emitted chunk as a JSON string, one per line");
  cmd->add_flag("--json", opts->json, "Print {\"text\": ...}");
  cmd->callback([opts, exit_code] {
    if (opts->model.empty() && opts->tokenizer.empty()) {
      *exit_code = fail(invalid_argument("detokenize: give -m DIR or --tokenizer FILE"));
      return;
    }
    *exit_code = run_detokenize(*opts);
  });
}

MLA_REGISTER_COMMAND("detokenize", register_detokenize);

}  // namespace mla::cli
