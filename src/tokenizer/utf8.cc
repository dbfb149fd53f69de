// UTF-8 validation, lossy repair and stepping (see utf8.h).
#include "tokenizer/utf8.h"

namespace mla::tok {
namespace {

// Valid range of the second byte after lead byte b (Unicode Table 3-7), or {1, 0} for a lead
// byte that never starts a sequence. Later continuation bytes are always 0x80..0xBF.
struct SecondByte {
  uint8_t lo, hi;
  int len;  // total sequence length
};
SecondByte second_byte(uint8_t b) {
  if (b < 0x80) return {0, 0, 1};
  if (b >= 0xC2 && b <= 0xDF) return {0x80, 0xBF, 2};
  if (b == 0xE0) return {0xA0, 0xBF, 3};
  if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) return {0x80, 0xBF, 3};
  if (b == 0xED) return {0x80, 0x9F, 3};
  if (b == 0xF0) return {0x90, 0xBF, 4};
  if (b >= 0xF1 && b <= 0xF3) return {0x80, 0xBF, 4};
  if (b == 0xF4) return {0x80, 0x8F, 4};
  return {1, 0, 0};
}

// Length of the well-formed sequence at s[i] (1..4), or 0 with *subpart = the length of the
// maximal ill-formed subpart (>= 1) or, when the text ends inside a sequence that could still be
// completed, *subpart = bytes left and *truncated = true.
int sequence_at(std::string_view s, size_t i, size_t* subpart, bool* truncated) {
  const auto b = static_cast<uint8_t>(s[i]);
  const SecondByte sb = second_byte(b);
  *truncated = false;
  if (sb.len == 1) return 1;
  if (sb.len == 0) {
    *subpart = 1;
    return 0;
  }
  size_t k = 1;
  for (; k < static_cast<size_t>(sb.len); ++k) {
    if (i + k >= s.size()) {
      *subpart = k;
      *truncated = true;
      return 0;
    }
    const auto c = static_cast<uint8_t>(s[i + k]);
    const uint8_t lo = k == 1 ? sb.lo : 0x80, hi = k == 1 ? sb.hi : 0xBF;
    if (c < lo || c > hi) {
      *subpart = k;
      return 0;
    }
  }
  return sb.len;
}

}  // namespace

size_t utf8_valid_prefix(std::string_view s) {
  size_t i = 0, subpart = 0;
  bool truncated = false;
  while (i < s.size()) {
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const int n = sequence_at(s, i, &subpart, &truncated);
    if (n == 0) return i;
    i += n;
  }
  return i;
}

void append_utf8_lossy(std::string_view s, std::string* out) {
  size_t i = 0, subpart = 0;
  bool truncated = false;
  while (i < s.size()) {
    const size_t good = i + utf8_valid_prefix(s.substr(i));
    out->append(s.data() + i, good - i);
    i = good;
    if (i == s.size()) break;
    sequence_at(s, i, &subpart, &truncated);
    out->append("\xEF\xBF\xBD");
    i += subpart;
  }
}

size_t utf8_incomplete_tail(std::string_view s) {
  // A sequence is at most 4 bytes, so only a lead byte among the last 3 can be incomplete.
  for (size_t back = 1; back <= 3 && back <= s.size(); ++back) {
    const size_t i = s.size() - back;
    const auto b = static_cast<uint8_t>(s[i]);
    if (b >= 0x80 && b < 0xC0) continue;  // continuation byte: look further back
    size_t subpart = 0;
    bool truncated = false;
    if (b >= 0x80 && sequence_at(s, i, &subpart, &truncated) == 0 && truncated) return back;
    return 0;
  }
  return 0;
}

char32_t utf8_next(std::string_view s, size_t* i) {
  const auto b = static_cast<uint8_t>(s[*i]);
  if (b < 0x80) {
    ++*i;
    return b;
  }
  int len = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : 2;
  char32_t cp = b & (0x7F >> len);
  for (int k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<uint8_t>(s[*i + k]) & 0x3F);
  *i += len;
  return cp;
}

char32_t utf8_prev(std::string_view s, size_t end, size_t* begin) {
  size_t i = end - 1;
  while (i > 0 && (static_cast<uint8_t>(s[i]) & 0xC0) == 0x80) --i;
  *begin = i;
  return utf8_next(s, &i);
}

void append_utf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool is_unicode_whitespace(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

}  // namespace mla::tok
