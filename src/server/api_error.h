// Errors the HTTP API answers with: a status and OpenAI's envelope
// {"error": {"message", "type", "param", "code"}} (docs/SERVING.md §Errors; only the wrapped
// form).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace mla::server {

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the request field at fault; empty: null
  std::string code;   // e.g. "model_not_found"; empty: null
};

// 400 invalid_request_error naming `param`.
ApiError bad_request(std::string param, std::string message);

nlohmann::json error_json(const ApiError& e);

// JSON text that never throws: invalid UTF-8 in strings is replaced by U+FFFD.
std::string dump_json(const nlohmann::json& j);

}  // namespace mla::server
