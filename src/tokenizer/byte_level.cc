// GPT-2 byte-level alphabet tables (see byte_level.h).
#include "tokenizer/byte_level.h"

#include "tokenizer/utf8.h"

namespace mla::tok {
namespace {

bool stands_for_itself(int b) {
  return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
}

struct Tables {
  std::array<char32_t, 256> to_char{};
  std::array<int16_t, 512> to_byte{};  // every alphabet code point is below U+0200
  Tables() {
    to_byte.fill(-1);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      to_char[b] = stands_for_itself(b) ? static_cast<char32_t>(b) : 0x100 + n++;
      to_byte[to_char[b]] = static_cast<int16_t>(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

char32_t byte_to_char(uint8_t b) {
  return tables().to_char[b];
}

int char_to_byte(char32_t cp) {
  return cp < 512 ? tables().to_byte[cp] : -1;
}

std::string bytes_to_token_text(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) append_utf8(byte_to_char(static_cast<uint8_t>(c)), &out);
  return out;
}

std::string token_text_to_bytes(std::string_view token) {
  std::string out;
  out.reserve(token.size());
  size_t i = 0;
  while (i < token.size()) {
    const int b = char_to_byte(utf8_next(token, &i));
    if (b < 0) return std::string(token);
    out.push_back(static_cast<char>(b));
  }
  return out;
}

}  // namespace mla::tok
