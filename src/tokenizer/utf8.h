// UTF-8 helpers for the tokenizer: strict validation, lossy repair, code point stepping. Not a
// general Unicode library: properties come from PCRE2 (regex) and the few tables here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace mla::tok {

// Length in bytes of the longest prefix of `s` that is well-formed UTF-8 (RFC 3629: no overlong
// forms, no surrogates, nothing above U+10FFFF). Equal to s.size() for valid text.
size_t utf8_valid_prefix(std::string_view s);

// Appends `s` to `out`, replacing each maximal ill-formed subpart by U+FFFD (the Unicode
// "substitution of maximal subparts" practice, which Rust's from_utf8_lossy and Python's
// errors="replace" both follow). Valid text is copied unchanged.
void append_utf8_lossy(std::string_view s, std::string* out);

// How many trailing bytes of `s` form the start of a sequence that more bytes could still
// complete (0..3). A streaming decoder holds those back instead of emitting U+FFFD too early.
size_t utf8_incomplete_tail(std::string_view s);

// Decodes the code point starting at s[i] of valid UTF-8 and advances i past it.
char32_t utf8_next(std::string_view s, size_t* i);

// Decodes the code point ending just before s[end] of valid UTF-8; *begin receives its offset.
char32_t utf8_prev(std::string_view s, size_t end, size_t* begin);

void append_utf8(char32_t cp, std::string* out);

// Unicode White_Space (the property Rust's char::is_whitespace uses).
bool is_unicode_whitespace(char32_t cp);

}  // namespace mla::tok
