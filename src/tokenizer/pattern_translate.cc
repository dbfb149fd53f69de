// Oniguruma → PCRE2 pattern rewriting with Unicode 16.0 property meaning (see unicode_delta.h).
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstring>

#include "io/safetensors_header.h"
#include "tokenizer/unicode_delta.h"

namespace mla::tok {
namespace {

// Unicode White_Space, the set Oniguruma's \s matches.
constexpr const char* kSpaceItems =
    R"(\t-\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";
// Its complement, for \S inside a class.
constexpr const char* kNonSpaceItems =
    R"(\x{0}-\x{8}\x{E}-\x{1F}\x{21}-\x{84}\x{86}-\x{9F}\x{A1}-\x{167F}\x{1681}-\x{1FFF})"
    R"(\x{200B}-\x{2027}\x{202A}-\x{202E}\x{2030}-\x{205E}\x{2060}-\x{2FFF}\x{3001}-\x{10FFFF})";

// Scripts a pattern may name (Kimi's pattern keeps Han runs apart). To the `tiktoken` package's
// regex engine a bare \p{Han} is Script=Han of Unicode 16.0, while PCRE2 10.42 reads it as
// Script_Extensions of Unicode 14.0 (CJK punctuation and more): PCRE2 gets sc:Han plus the code
// points Unicode 15-16 added to the script. Found by matching every code point with both engines
// (tests/e2e/tokenizer/tiktoken_oracle.py compares whole encodings).
constexpr UnicodeDelta kScripts[] = {
    {"Han", "\\x{2B739}\\x{2EBF0}-\\x{2EE5D}\\x{31350}-\\x{323AF}"},
};

// PCRE2's name for a property: general categories keep theirs, scripts become sc:NAME.
std::string pcre2_property(std::string_view prop) {
  for (const UnicodeDelta& s : kScripts)
    if (prop == s.property) return fmt::format("sc:{}", prop);
  return std::string(prop);
}

const UnicodeDelta* find_delta(std::string_view prop) {
  for (size_t i = 0; i < kUnicodeDeltaCount; ++i)
    if (prop == kUnicodeDelta[i].property) return &kUnicodeDelta[i];
  for (const UnicodeDelta& s : kScripts)
    if (prop == s.property) return &s;
  return nullptr;
}

// End of the character class that starts at p[open] ('['): the index of its closing ']'. Escapes
// are skipped; a ']' right after '[' or '[^' is a literal. npos when unterminated or nested.
size_t class_end(std::string_view p, size_t open) {
  size_t i = open + 1;
  if (i < p.size() && p[i] == '^') ++i;
  for (bool first = true; i < p.size(); ++i, first = false) {
    if (p[i] == '\\') {
      ++i;
    } else if (p[i] == '[') {
      return std::string_view::npos;
    } else if (p[i] == ']' && !first) {
      return i;
    }
  }
  return std::string_view::npos;
}

}  // namespace

Result<std::string> translate_pattern(std::string_view p, std::string_view where) {
  const auto refuse = [&](size_t at, std::string_view what) -> Status {
    return unimplemented(fmt::format(
        "{}: regex {}: {} at offset {} is not supported (PCRE2 would give it a different meaning "
        "than Hugging Face's Oniguruma)",
        where, io_detail::quote_text(p), what, at));
  };
  std::string out;
  out.reserve(p.size() * 2);
  int class_depth = 0;
  bool class_start = false;  // just after '[' or '[^': a ']' here is a literal
  size_t class_out = 0;      // where the open class starts in `out`
  bool class_negated = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c != '\\') {
      if (c == '[' && class_depth > 0 && i + 1 < p.size() && p[i + 1] == ':') {
        const size_t close = p.find(":]", i + 2);
        if (close == std::string_view::npos) return refuse(i, "an unterminated POSIX class");
        out.append(p.substr(i, close + 2 - i));
        i = close + 1;
        continue;
      }
      if (c == '[' && class_depth > 0) return refuse(i, "a nested character class");
      if (c == '&' && class_depth > 0 && i + 1 < p.size() && p[i + 1] == '&') {
        // [A&&[B]] (Kimi's "letters but not Han"): PCRE2 10.42 has no class intersection, so
        // the class becomes a lookahead for B in front of A, which matches the same one character.
        const size_t open = i + 2, close = open < p.size() && p[open] == '['
                                               ? class_end(p, open)
                                               : std::string_view::npos;
        if (close == std::string_view::npos || close + 1 >= p.size() || p[close + 1] != ']')
          return refuse(i, "class intersection && other than [A&&[B]]");
        if (class_negated || class_start) return refuse(i, "a negated or empty class before &&");
        MLA_ASSIGN_OR_RETURN(std::string right,
                             translate_pattern(p.substr(open, close + 1 - open), where));
        const std::string left = out.substr(class_out) + "]";
        out.resize(class_out);
        out += fmt::format("(?:(?={}){})", right, left);
        i = close + 1;
        class_depth = 0;
        continue;
      }
      if (c == '[') {
        class_depth = 1;
        class_out = out.size();
        out += c;
        class_start = true;
        class_negated = i + 1 < p.size() && p[i + 1] == '^';
        if (class_negated) {
          out += '^';
          ++i;
        }
        continue;
      }
      if (c == ']' && class_depth > 0 && !class_start) class_depth = 0;
      class_start = false;
      out += c;
      continue;
    }
    class_start = false;
    if (i + 1 >= p.size()) return refuse(i, "a trailing backslash");
    const char e = p[++i];
    const bool in_class = class_depth > 0;
    if (e == 'p' || e == 'P') {
      if (i + 1 >= p.size() || p[i + 1] != '{') return refuse(i - 1, "a one-letter \\p");
      const size_t close = p.find('}', i + 2);
      if (close == std::string_view::npos) return refuse(i - 1, "an unterminated \\p{");
      std::string_view prop = p.substr(i + 2, close - i - 2);
      bool negated = e == 'P';
      if (!prop.empty() && prop[0] == '^') {
        negated = !negated;
        prop.remove_prefix(1);
      }
      const UnicodeDelta* d = find_delta(prop);
      if (!d) return refuse(i - 1, fmt::format("the property \\p{{{}}}", prop));
      const std::string name = pcre2_property(prop);
      const std::string items = fmt::format("\\p{{{}}}{}", name, d->items);
      if (negated && in_class && std::strlen(d->items) > 0)
        return refuse(i - 1, "a negated property inside a class");
      if (in_class)
        out += negated ? fmt::format("\\P{{{}}}", name) : items;
      else
        out += (negated ? "[^" : "[") + items + "]";
      i = close;
      continue;
    }
    if (e == 's') {
      out += in_class ? std::string(kSpaceItems) : fmt::format("[{}]", kSpaceItems);
      continue;
    }
    if (e == 'S') {
      out += in_class ? std::string(kNonSpaceItems) : fmt::format("[^{}]", kSpaceItems);
      continue;
    }
    if (e == 'u') {
      if (i + 4 >= p.size() || !std::all_of(p.begin() + i + 1, p.begin() + i + 5, ::isxdigit))
        return refuse(i - 1, "\\u without four hex digits");
      out += fmt::format("\\x{{{}}}", p.substr(i + 1, 4));
      i += 4;
      continue;
    }
    if (std::strchr("wWbBdDhHvVRXQEKoc", e)) return refuse(i - 1, fmt::format("\\{}", e));
    out += '\\';
    out += e;
  }
  return out;
}

}  // namespace mla::tok
