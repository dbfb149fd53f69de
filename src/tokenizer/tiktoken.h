// tiktoken-format BPE (the `tiktoken.model` that Kimi-K2 and Moonlight ship instead of a
// tokenizer.json) turned into the byte-level BPE our engine runs, with the ids the `tiktoken`
// package gives. docs/TOKENIZER.md §tiktoken models has the format and why the conversion is exact.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mla/status.h"

namespace mla::tok {

// One line of a tiktoken.model: the token's raw bytes and its rank (= its id and its merge
// priority, lower first).
struct RankedToken {
  std::string bytes;
  int32_t rank = 0;
};

// Parses "<base64> <rank>" lines (empty lines skipped). Errors name `origin` and the line: not
// two fields, bad base64, a rank that is not an integer in [0, 2^31), a rank or a token given
// twice, and (after the last line) a single byte that has no token.
Result<std::vector<RankedToken>> parse_tiktoken_ranks(std::string_view text,
                                                      std::string_view origin);

// The merges that reproduce tiktoken's encoding, as raw-byte pairs in rank order: for each token
// that tiktoken's BPE can build from its own bytes, the last merge that run makes (tokens it
// cannot build get none: tiktoken emits them only for a piece that is the whole token).
std::vector<std::pair<std::string, std::string>> tiktoken_merges(
    const std::vector<RankedToken>& ranks);

// An added token (tokenizer_config.json added_tokens_decoder: id → content, special).
struct TiktokenAdded {
  int32_t id = 0;
  std::string content;
  bool special = true;
};

// tokenizer.json for the ranks: the vocabulary and merges in GPT-2's byte alphabet, a BPE that
// takes a piece whole when it is a token (tiktoken's shortcut), one Split with `pattern`
// (tiktoken's regex syntax), ByteLevel decoding, and `added` as added tokens.
nlohmann::json tiktoken_tokenizer_json(const std::vector<RankedToken>& ranks,
                                       std::string_view pattern,
                                       const std::vector<TiktokenAdded>& added);

// The split pattern of Kimi-K2 and Moonlight (their tokenization_kimi.py `pat_str`), as its
// alternatives in order; joined with '|' it is the pattern.
const std::vector<std::string>& kimi_pattern_parts();
std::string kimi_pattern();

}  // namespace mla::tok
