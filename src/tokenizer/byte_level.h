// The GPT-2 byte-level alphabet: each of the 256 byte values is shown as one printable code point
// (printable bytes stand for themselves, the other 68 map to U+0100 + n in byte order), so that a
// BPE vocabulary of strings can cover arbitrary bytes.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace mla::tok {

// Code point that stands for byte b.
char32_t byte_to_char(uint8_t b);

// Byte a code point stands for, or -1 when the code point is not in the alphabet.
int char_to_byte(char32_t cp);

// The token text of raw bytes: each byte as its alphabet character, UTF-8 encoded.
std::string bytes_to_token_text(std::string_view bytes);

// The ByteLevel decoder on one token: its characters mapped back to bytes; when any character is
// outside the alphabet (added tokens such as "<｜User｜>"), the token's own UTF-8 bytes, as
// Hugging Face's decoder does. `token` must be valid UTF-8.
std::string token_text_to_bytes(std::string_view token);

}  // namespace mla::tok
