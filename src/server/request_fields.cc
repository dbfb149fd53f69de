#include "server/request_fields.h"

#include <fmt/format.h>

#include <cmath>

#include "tokenizer/json_read.h"

namespace mla::server {

using nlohmann::json;
using MaybeError = std::optional<ApiError>;

const json* field(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

MaybeError get_int(const json& obj, const char* key, int64_t lo, int64_t hi,
                   std::optional<int64_t>* out) {
  const json* v = field(obj, key);
  if (!v) return std::nullopt;
  int64_t x = 0;
  if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();
    if (u > uint64_t(INT64_MAX))
      return bad_request(key, fmt::format("{} is {}, must be in [{}, {}]", key, u, lo, hi));
    x = int64_t(u);
  } else if (v->is_number_integer()) {
    x = v->get<int64_t>();
  } else {
    return bad_request(key,
                       fmt::format("{} must be an integer, got {}", key, tok::json_excerpt(*v)));
  }
  if (x < lo || x > hi)
    return bad_request(key, fmt::format("{} is {}, must be in [{}, {}]", key, x, lo, hi));
  *out = x;
  return std::nullopt;
}

MaybeError get_number(const json& obj, const char* key, double lo, double hi,
                      std::optional<double>* out) {
  const json* v = field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_number())
    return bad_request(key, fmt::format("{} must be a number, got {}", key, tok::json_excerpt(*v)));
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi)
    return bad_request(key, fmt::format("{} is {}, must be in [{}, {}]", key, x, lo, hi));
  *out = x;
  return std::nullopt;
}

MaybeError get_bool(const json& obj, const char* key, bool* out) {
  const json* v = field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean())
    return bad_request(key,
                       fmt::format("{} must be true or false, got {}", key, tok::json_excerpt(*v)));
  *out = v->get<bool>();
  return std::nullopt;
}

}  // namespace mla::server
