// `mla tokenize`: text to token ids with a model's tokenizer.json, as a comma-separated line or
// JSON; --batch encodes one JSON string per line (used by the live oracle test).
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "tokenizer/json_read.h"
#include "tokenizer/tokenizer_config.h"

namespace mla::cli {
namespace {

struct TokenizeOptions {
  std::string model;
  std::string tokenizer;
  std::string text;
  std::string file;
  std::string batch;
  bool special = false;
  bool bos = false;
  bool json = false;
};

int fail(const Status& s) {
  fmt::print(stderr, "error: {}\n", s.message());
  return 1;
}

std::string join_ids(const std::vector<int32_t>& ids) {
  return fmt::format("{}", fmt::join(ids, ","));
}

// Each line of `path` is a JSON string; prints a JSON array of ids (or {"error": ...}) per line.
int run_batch(const tok::Tokenizer& t, const tok::EncodeOptions& eo, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return fail(not_found(fmt::format("{}: cannot open", path)));
  std::string line;
  size_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    Result<tok::Json> j = tok::parse_json(line, fmt::format("{}:{}", path, n));
    if (!j.ok()) return fail(j.status());
    if (!j->is_string())
      return fail(invalid_argument(fmt::format("{}:{}: expected a JSON string", path, n)));
    Result<std::vector<int32_t>> ids = t.encode(j->get_ref<const std::string&>(), eo);
    if (ids.ok())
      fmt::print("[{}]\n", join_ids(*ids));
    else
      fmt::print("{}\n", nlohmann::json({{"error", ids.status().message()}}).dump());
  }
  std::fflush(stdout);
  return 0;
}

int run_tokenize(const TokenizeOptions& o) {
  Result<tok::LoadedTokenizer> lt = tok::load_tokenizer(o.model, o.tokenizer);
  if (!lt.ok()) return fail(lt.status());
  tok::EncodeOptions eo;
  eo.parse_special = o.special;
  eo.add_bos = o.bos;
  if (!o.batch.empty()) return run_batch(lt->tokenizer, eo, o.batch);
  std::string text = o.text;
  if (!o.file.empty()) {
    Result<std::string> r = tok::read_text_file(o.file);
    if (!r.ok()) return fail(r.status());
    text = std::move(*r);
  }
  Result<std::vector<int32_t>> ids = lt->tokenizer.encode(text, eo);
  if (!ids.ok()) return fail(ids.status());
  if (o.json)
    fmt::print("{}\n", nlohmann::json({{"ids", *ids}}).dump());
  else
    fmt::print("{}\n", join_ids(*ids));
  std::fflush(stdout);
  return 0;
}

}  // namespace

void register_tokenize(CLI::App& app, int* exit_code) {
  auto opts = std::make_shared<TokenizeOptions>();
  CLI::App* cmd =
      app.add_subcommand("tokenize", "Text to token ids (tokenizer.json, byte-level BPE)");
  CLI::Option* m = cmd->add_option("-m,--model", opts->model,
                                   "Model directory (tokenizer.json and tokenizer_config.json)");
  CLI::Option* t = cmd->add_option("--tokenizer", opts->tokenizer, "A tokenizer.json file");
  m->excludes(t);
  CLI::Option* text = cmd->add_option("--text", opts->text, "The text to encode");
  CLI::Option* file = cmd->add_option("--file", opts->file, "Encode this file's bytes (UTF-8)");
  CLI::Option* batch =
      cmd->add_option("--batch", opts->batch,
                      "Encode each line (a JSON string) of this file; one JSON array per line");
  text->excludes(file)->excludes(batch);
  file->excludes(batch);
  cmd->add_flag("--special", opts->special,
                "Turn special-token text into its id (default: all text is plain text)");
  cmd->add_flag("--bos", opts->bos, "Prepend BOS (needs -m: tokenizer_config.json names it)");
  cmd->add_flag("--json", opts->json, "Print {\"ids\": [...]}");
  cmd->callback([opts, exit_code, cmd] {
    if (opts->model.empty() && opts->tokenizer.empty()) {
      *exit_code = fail(invalid_argument("tokenize: give -m DIR or --tokenizer FILE"));
      return;
    }
    if (cmd->count("--text") + cmd->count("--file") + cmd->count("--batch") == 0) {
      *exit_code = fail(invalid_argument("tokenize: give --text, --file or --batch"));
      return;
    }
    *exit_code = run_tokenize(*opts);
  });
}

MLA_REGISTER_COMMAND("tokenize", register_tokenize);

}  // namespace mla::cli
