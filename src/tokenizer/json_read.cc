// JSON reading for the tokenizer (see json_read.h). nlohmann exceptions stop here.
#include "tokenizer/json_read.h"

#include <cerrno>
#include <charconv>
#include <cstdlib>
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

namespace {

template <class J>
Result<J> parse_checked(std::string_view text, std::string_view origin) {
  if (const std::optional<size_t> at = json_depth_exceeded(text))
    return data_loss(fmt::format("{}: JSON nests deeper than {} levels (at byte {})", origin,
                                 kMaxJsonFileDepth, *at));
  // Keys seen so far in each open object, innermost last.
  std::vector<std::unordered_set<std::string>> open;
  std::string duplicate;
  const typename J::parser_callback_t cb = [&](int, typename J::parse_event_t ev, J& parsed) {
    switch (ev) {
      case J::parse_event_t::object_start:
        open.emplace_back();
        break;
      case J::parse_event_t::object_end:
        if (!open.empty()) open.pop_back();
        break;
      case J::parse_event_t::key:
        if (!open.empty() && !open.back().insert(parsed.template get<std::string>()).second &&
            duplicate.empty())
          duplicate = parsed.template get<std::string>();
        break;
      default:
        break;
    }
    return true;
  };
  try {
    J j = J::parse(text.begin(), text.end(), cb);
    if (!duplicate.empty())
      return data_loss(fmt::format("{}: key {} appears twice in one JSON object", origin,
                                   io_detail::quote_text(duplicate)));
    return j;
  } catch (const typename J::exception& e) {
    return data_loss(fmt::format("{}: not valid JSON: {}", origin, e.what()));
  }
}

}  // namespace

Result<Json> parse_json(std::string_view text, std::string_view origin) {
  return parse_checked<Json>(text, origin);
}

Result<OrderedJson> parse_ordered_json(std::string_view text, std::string_view origin) {
  return parse_checked<OrderedJson>(text, origin);
}

template <class J>
Result<bool> get_bool(const J& obj, const char* key, bool fallback, std::string_view where) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_boolean())
    return invalid_argument(
        fmt::format("{}.{}: expected true or false, got {}", where, key, json_excerpt(*it)));
  return it->template get<bool>();
}

template <class J>
Result<std::string> get_string(const J& obj, const char* key, std::string_view where) {
  const auto it = obj.find(key);
  if (it == obj.end())
    return invalid_argument(fmt::format("{}: the field \"{}\" is missing", where, key));
  if (!it->is_string())
    return invalid_argument(
        fmt::format("{}.{}: expected a string, got {}", where, key, json_excerpt(*it)));
  return it->template get<std::string>();
}

template <class J>
std::string json_excerpt(const J& v) {
  std::string s = v.dump(-1, ' ', false, J::error_handler_t::replace);
  if (s.size() > 120) s = s.substr(0, 117) + "...";
  return s;
}

template Result<bool> get_bool(const Json&, const char*, bool, std::string_view);
template Result<bool> get_bool(const OrderedJson&, const char*, bool, std::string_view);
template Result<std::string> get_string(const Json&, const char*, std::string_view);
template Result<std::string> get_string(const OrderedJson&, const char*, std::string_view);
template std::string json_excerpt(const Json&);
template std::string json_excerpt(const OrderedJson&);

namespace {

// A double as Python's repr writes it: the shortest digits that read back to it (correctly
// rounded, as std::to_chars gives them), positional for decimal exponents -4 to 15 (with ".0"
// when there is no fraction), else d.ddde+XX.
std::string python_float(double x) {
  char buf[64];
  const std::to_chars_result r =
      std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  const std::string_view sci(buf, size_t(r.ptr - buf));  // [-]d[.ddd]e(+|-)XX
  const size_t e = sci.find('e');
  const bool neg = sci[0] == '-';
  std::string digits;
  for (char c : sci.substr(neg, e - neg))
    if (c != '.') digits.push_back(c);
  const int exp = std::stoi(std::string(sci.substr(e + 1)));
  std::string out = neg ? "-" : "";
  if (exp < -4 || exp >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    return out + fmt::format("e{}{:02d}", exp < 0 ? '-' : '+', std::abs(exp));
  }
  if (exp < 0) return out + "0." + std::string(size_t(-exp - 1), '0') + digits;
  if (digits.size() <= size_t(exp) + 1) digits.resize(size_t(exp) + 1, '0');
  const std::string frac = digits.substr(size_t(exp) + 1);
  return out + digits.substr(0, size_t(exp) + 1) + "." + (frac.empty() ? "0" : frac);
}

void python_json_to(const OrderedJson& v, std::string* out) {
  if (v.is_object()) {
    out->push_back('{');
    bool first = true;
    for (const auto& [key, item] : v.items()) {
      if (!first) out->append(", ");
      first = false;
      python_json_to(OrderedJson(key), out);
      out->append(": ");
      python_json_to(item, out);
    }
    out->push_back('}');
  } else if (v.is_array()) {
    out->push_back('[');
    for (size_t i = 0; i < v.size(); ++i) {
      if (i) out->append(", ");
      python_json_to(v[i], out);
    }
    out->push_back(']');
  } else if (v.is_number_float()) {
    out->append(python_float(v.get<double>()));
  } else {
    // nlohmann writes strings with the escapes json.dumps uses when ensure_ascii is off: quote,
    // backslash, b f n r t by letter, other controls as u00xx.
    out->append(v.dump(-1, ' ', false, OrderedJson::error_handler_t::replace));
  }
}

}  // namespace

std::string python_json(const OrderedJson& v) {
  std::string out;
  python_json_to(v, &out);
  return out;
}

}  // namespace mla::tok
