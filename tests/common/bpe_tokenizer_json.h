// Byte-level BPE tokenizer.json documents for tests: the 256 byte tokens plus what a test adds.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <utility>
#include <vector>

#include "tokenizer/byte_level.h"

namespace mla::tok::testing_tok {

using Json = nlohmann::json;

struct AddedToken {
  int id;
  std::string content;
  bool special = true;
};

// Ids 0..255 are the bytes (in their byte-level text form); `extra_vocab` adds (text, id) pairs,
// `merges` is the model's merge list as written in the file, `added` the added_tokens.
inline Json byte_level_bpe_json(const std::vector<std::pair<std::string, int>>& extra_vocab = {},
                                Json merges = Json::array(),
                                const std::vector<AddedToken>& added = {}) {
  Json vocab = Json::object();
  for (int b = 0; b < 256; ++b)
    vocab[bytes_to_token_text(std::string(1, static_cast<char>(b)))] = b;
  for (const auto& [text, id] : extra_vocab) vocab[text] = id;
  Json added_tokens = Json::array();
  for (const AddedToken& a : added)
    added_tokens.push_back({{"id", a.id},
                            {"content", a.content},
                            {"single_word", false},
                            {"lstrip", false},
                            {"rstrip", false},
                            {"normalized", false},
                            {"special", a.special}});
  return Json{
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", std::move(added_tokens)},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"vocab", std::move(vocab)},
        {"merges", std::move(merges)}}}};
}

// The smallest such file with merges and an added token, for tests that break one field:
// "ab" (256), "abc" (257), merges "a b" (string form) and ["ab", "c"] (pair form); <s> (258).
inline Json minimal() {
  return byte_level_bpe_json({{"ab", 256}, {"abc", 257}},
                             Json::array({"a b", Json::array({"ab", "c"})}), {{258, "<s>"}});
}

}  // namespace mla::tok::testing_tok
