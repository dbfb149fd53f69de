// Unicode-version bridge for regexes: Hugging Face `tokenizers` matches with Oniguruma's Unicode
// 16.0 tables, PCRE2 10.42 has Unicode 14.0. Patterns are rewritten so that each property means
// what it means to the oracle (new emoji, scripts and symbols included).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "mla/status.h"

namespace mla::tok {

struct UnicodeDelta {
  const char* property;  // general category: "L", "Nd", ...
  const char* items;     // PCRE2 class items for the code points added after Unicode 14.0
};
extern const UnicodeDelta kUnicodeDelta[];
extern const size_t kUnicodeDeltaCount;

// Rewrites an Oniguruma-syntax pattern from tokenizer.json into PCRE2 syntax with the oracle's
// meaning: \p{X} gains the code points Unicode 15-16 added to X, \s and \S become Unicode
// White_Space (PCRE2 adds U+180E), \uHHHH becomes \x{HHHH}, \p{Han} is Script=Han of Unicode 16.0,
// and a class intersection [A&&[B]] (tiktoken's regex syntax) becomes (?:(?=[B])[A]). Constructs
// whose meaning would differ and cannot be bridged (\w, \b, \d, \h, other scripts, other uses of
// &&) are an error naming the construct; `where` names the file and field.
Result<std::string> translate_pattern(std::string_view pattern, std::string_view where);

}  // namespace mla::tok
