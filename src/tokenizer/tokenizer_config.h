// A model directory's tokenizer: tokenizer.json plus tokenizer_config.json (BOS/EOS names, whether
// plain encodes add BOS, the chat template text that chat_format.h recognises).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "mla/status.h"
#include "tokenizer/tiktoken.h"
#include "tokenizer/tokenizer.h"

namespace mla::tok {

struct TokenizerConfig {
  std::optional<std::string> bos_token;  // token text, e.g. "<｜begin▁of▁sentence｜>"
  std::optional<std::string> eos_token;
  bool add_bos_token = false;  // plain (non-chat) prompts start with BOS
  std::string chat_template;   // Jinja source; empty when the model ships none
  // added_tokens_decoder (id → content, special): the special tokens of a tiktoken model, which
  // has no tokenizer.json to list them. Ignored when tokenizer.json is there.
  std::vector<TiktokenAdded> added_tokens_decoder;
};

// bos_token/eos_token may be strings or {"content": ...} objects; chat_template a string or a
// list of {"name", "template"} (the one named "default" is taken).
Result<TokenizerConfig> parse_tokenizer_config(std::string_view json, std::string_view origin);

struct LoadedTokenizer {
  Tokenizer tokenizer;  // with bos_id/eos_id set from the config
  TokenizerConfig config;

  // A text prompt starts with BOS: the config asks for it and the tokenizer has one (what the
  // server, generate, probe --compare and the public API all encode with).
  bool adds_bos() const { return config.add_bos_token && tokenizer.bos_id().has_value(); }
};

// Reads DIR/tokenizer.json (or, without one, DIR/tiktoken.model: load_tiktoken_dir) and, when
// present, DIR/tokenizer_config.json (and DIR/chat_template.jinja when the config has no
// template). A named BOS/EOS that the tokenizer lacks is an error. A path ending in .gguf is read
// with load_tokenizer_gguf (gguf_tokenizer.h).
Result<LoadedTokenizer> load_tokenizer_dir(const std::string& dir);

// The file a model directory's tokenizer comes from (tokenizer.json, else tiktoken.model), or
// nullopt when it has neither: the model then serves token ids only.
std::optional<std::string> tokenizer_file(const std::string& dir);

// A tiktoken model (Kimi-K2, Moonlight): DIR/tiktoken.model ranks, Kimi's split pattern, the
// config's added_tokens_decoder. When DIR/tokenization_kimi.py is there, each alternative of the
// pattern must appear in it verbatim (a different pattern is refused, not silently replaced).
Result<Tokenizer> load_tiktoken_dir(const std::string& dir, const TokenizerConfig& config);

// The checks load_tokenizer_dir makes once the files are read, for any source: the named BOS /
// EOS are tokens (their ids set on the tokenizer), a recognised chat template encodes.
Result<LoadedTokenizer> finish_loaded_tokenizer(Tokenizer tok, TokenizerConfig config,
                                                const std::string& config_origin,
                                                const std::string& tok_origin);

// For the CLI: exactly one of a model directory (or a .gguf file) or a bare tokenizer.json (which
// brings no config, hence no BOS or chat template).
Result<LoadedTokenizer> load_tokenizer(const std::string& model_dir,
                                       const std::string& tokenizer_json);

}  // namespace mla::tok
