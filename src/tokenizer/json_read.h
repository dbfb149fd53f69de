// Reading JSON files for the tokenizer without exceptions: whole-file reads, a parse that
// rejects duplicate object keys, and typed field getters whose errors name file, field and value.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "mla/status.h"

namespace mla::tok {

using Json = nlohmann::json;
// Keys in the order the text gives them: what chat templates render (tools, call arguments).
using OrderedJson = nlohmann::ordered_json;

// tokenizer.json above this is refused (docs/RELIABILITY.md §Checklist R26; DeepSeek-V3's is
// ~7.8 MB).
inline constexpr uint64_t kMaxTokenizerFileBytes = uint64_t{64} << 20;

// The whole file; invalid_argument when it holds more than max_bytes (never read past the cap).
// Model files pass kMaxTokenizerFileBytes; the default (no cap) is for user text given to tools.
Result<std::string> read_text_file(const std::string& path, uint64_t max_bytes = UINT64_MAX);

// Parses `text`; a syntax error, nesting deeper than kMaxJsonFileDepth (io/json_limits.h) or a key
// repeated within one object is an error naming `origin`.
Result<Json> parse_json(std::string_view text, std::string_view origin);
Result<OrderedJson> parse_ordered_json(std::string_view text, std::string_view origin);

// Field access for an object `obj` (Json or OrderedJson) found at `where` (e.g. "tok.json:
// model"). A missing field yields `fallback`; a field of the wrong type is an error.
template <class J>
Result<bool> get_bool(const J& obj, const char* key, bool fallback, std::string_view where);
template <class J>
Result<std::string> get_string(const J& obj, const char* key, std::string_view where);

// The value of a field, cut to a short one-line text for messages.
template <class J>
std::string json_excerpt(const J& v);

// `v` as Python's json.dumps(v, ensure_ascii=False) writes it, which is what the `tojson` filter
// gives in Hugging Face chat templates: ", " between items, ": " after keys, keys in `v`'s
// order, non-ASCII text as is. Invalid UTF-8 is replaced by U+FFFD.
std::string python_json(const OrderedJson& v);

}  // namespace mla::tok
