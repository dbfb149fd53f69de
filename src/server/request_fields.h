// Typed reads of request body fields, each refusal a 400 naming the field (OpenAI treats null
// as "not given"). Shared by the request parsers (openai_request, openai_tools, request_extras).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>

#include "server/api_error.h"

namespace mla::server {

// The field's value, or nullptr when absent or null.
const nlohmann::json* field(const nlohmann::json& obj, const char* key);
// An integer in [lo, hi] into *out (left alone when absent).
std::optional<ApiError> get_int(const nlohmann::json& obj, const char* key, int64_t lo, int64_t hi,
                                std::optional<int64_t>* out);
// A finite number in [lo, hi] into *out (left alone when absent).
std::optional<ApiError> get_number(const nlohmann::json& obj, const char* key, double lo, double hi,
                                   std::optional<double>* out);
// true / false into *out (left alone when absent).
std::optional<ApiError> get_bool(const nlohmann::json& obj, const char* key, bool* out);

}  // namespace mla::server
