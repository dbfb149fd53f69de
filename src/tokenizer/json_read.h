// Reading JSON files for the tokenizer without exceptions: whole-file reads, a parse that
// rejects duplicate object keys, and typed field getters whose errors name file, field and value.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "mla/status.h"

namespace mla::tok {

using Json = nlohmann::json;

Result<std::string> read_text_file(const std::string& path);

// Parses `text`; a syntax error or a key repeated within one object is an error naming `origin`.
Result<Json> parse_json(std::string_view text, std::string_view origin);

// Field access for an object `obj` found at `where` (e.g. "tok.json: model"). A missing field
// yields `fallback`; a field of the wrong type is an error.
Result<bool> get_bool(const Json& obj, const char* key, bool fallback, std::string_view where);
Result<std::string> get_string(const Json& obj, const char* key, std::string_view where);

// The value of a field, cut to a short one-line text for messages.
std::string json_excerpt(const Json& v);

}  // namespace mla::tok
