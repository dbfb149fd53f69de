// load_tiktoken_dir (tokenizer_config.h): a Kimi-K2 / Moonlight directory's tiktoken.model and
// config turned into a Tokenizer through tiktoken.h's conversion.
#include <fmt/format.h>

#include <filesystem>

#include "io/safetensors_header.h"
#include "tokenizer/json_read.h"
#include "tokenizer/tiktoken.h"
#include "tokenizer/tokenizer_config.h"

namespace mla::tok {

Result<Tokenizer> load_tiktoken_dir(const std::string& dir, const TokenizerConfig& config) {
  namespace fs = std::filesystem;
  const std::string path = (fs::path(dir) / "tiktoken.model").string();
  // The pattern lives in Python code we do not run; when that code is there, make sure it is the
  // pattern this build knows.
  const fs::path py = fs::path(dir) / "tokenization_kimi.py";
  std::error_code ec;
  if (fs::exists(py, ec)) {
    MLA_ASSIGN_OR_RETURN(std::string code, read_text_file(py.string(), kMaxTokenizerFileBytes));
    for (const std::string& part : kimi_pattern_parts())
      if (code.find(part) == std::string::npos)
        return unimplemented(fmt::format(
            "{}: its pat_str lacks the alternative {} of the Kimi split pattern this build "
            "implements; a different pattern is not supported",
            py.string(), io_detail::quote_text(part)));
  }
  MLA_ASSIGN_OR_RETURN(std::string text, read_text_file(path, kMaxTokenizerFileBytes));
  MLA_ASSIGN_OR_RETURN(std::vector<RankedToken> ranks, parse_tiktoken_ranks(text, path));
  return Tokenizer::from_json_object(
      tiktoken_tokenizer_json(ranks, kimi_pattern(), config.added_tokens_decoder), path);
}

}  // namespace mla::tok
