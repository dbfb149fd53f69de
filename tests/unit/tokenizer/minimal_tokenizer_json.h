// The smallest byte-level BPE tokenizer.json the loader accepts, for tests that break one field.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "tokenizer/byte_level.h"

namespace mla::tok::testing_tok {

using Json = nlohmann::json;

// 256 byte tokens (ids 0..255), "ab" (256), "abc" (257), merges "a b", "ab c"; <s> (258) special.
inline Json minimal() {
  Json vocab = Json::object();
  for (int b = 0; b < 256; ++b)
    vocab[bytes_to_token_text(std::string(1, static_cast<char>(b)))] = b;
  vocab["ab"] = 256;
  vocab["abc"] = 257;
  return Json{
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", Json::array({{{"id", 258},
                                     {"content", "<s>"},
                                     {"single_word", false},
                                     {"lstrip", false},
                                     {"rstrip", false},
                                     {"normalized", false},
                                     {"special", true}}})},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"vocab", vocab},
        {"merges", Json::array({"a b", Json::array({"ab", "c"})})}}}};
}

}  // namespace mla::tok::testing_tok
