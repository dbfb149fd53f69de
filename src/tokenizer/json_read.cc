// JSON reading for the tokenizer (see json_read.h). nlohmann exceptions stop here.
#include "tokenizer/json_read.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <unordered_set>
#include <vector>

#include <fmt/format.h>

#include "io/json_limits.h"
#include "io/safetensors_header.h"

namespace mla::tok {

Result<std::string> read_text_file(const std::string& path, uint64_t max_bytes) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    const int err = errno;
    return (err == ENOENT ? not_found
                          : io_error)(fmt::format("{}: cannot open: {}", path, std::strerror(err)));
  }
  // Read at most one byte past the cap (the file may grow after any size check), then refuse.
  std::string text;
  char buf[1 << 16];
  while (f && text.size() <= max_bytes) {
    f.read(buf, sizeof buf);
    text.append(buf, size_t(f.gcount()));
  }
  if (f.bad()) return io_error(fmt::format("{}: read failed", path));
  if (text.size() > max_bytes)
    return invalid_argument(
        fmt::format("{}: larger than the limit of {} bytes for this file", path, max_bytes));
  return text;
}

Result<Json> parse_json(std::string_view text, std::string_view origin) {
  if (const std::optional<size_t> at = json_depth_exceeded(text))
    return data_loss(fmt::format("{}: JSON nests deeper than {} levels (at byte {})", origin,
                                 kMaxJsonFileDepth, *at));
  // Keys seen so far in each open object, innermost last.
  std::vector<std::unordered_set<std::string>> open;
  std::string duplicate;
  const Json::parser_callback_t cb = [&](int, Json::parse_event_t ev, Json& parsed) {
    switch (ev) {
      case Json::parse_event_t::object_start:
        open.emplace_back();
        break;
      case Json::parse_event_t::object_end:
        if (!open.empty()) open.pop_back();
        break;
      case Json::parse_event_t::key:
        if (!open.empty() && !open.back().insert(parsed.get<std::string>()).second &&
            duplicate.empty())
          duplicate = parsed.get<std::string>();
        break;
      default:
        break;
    }
    return true;
  };
  try {
    Json j = Json::parse(text.begin(), text.end(), cb);
    if (!duplicate.empty())
      return data_loss(fmt::format("{}: key {} appears twice in one JSON object", origin,
                                   io_detail::quote_text(duplicate)));
    return j;
  } catch (const Json::exception& e) {
    return data_loss(fmt::format("{}: not valid JSON: {}", origin, e.what()));
  }
}

Result<bool> get_bool(const Json& obj, const char* key, bool fallback, std::string_view where) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_boolean())
    return invalid_argument(
        fmt::format("{}.{}: expected true or false, got {}", where, key, json_excerpt(*it)));
  return it->get<bool>();
}

Result<std::string> get_string(const Json& obj, const char* key, std::string_view where) {
  const auto it = obj.find(key);
  if (it == obj.end())
    return invalid_argument(fmt::format("{}: the field \"{}\" is missing", where, key));
  if (!it->is_string())
    return invalid_argument(
        fmt::format("{}.{}: expected a string, got {}", where, key, json_excerpt(*it)));
  return it->get<std::string>();
}

std::string json_excerpt(const Json& v) {
  std::string s = v.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (s.size() > 120) s = s.substr(0, 117) + "...";
  return s;
}

}  // namespace mla::tok
