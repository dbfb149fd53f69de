// A compiled PCRE2 pattern (UTF-8, Unicode properties, JIT) that lists the non-overlapping
// matches in a piece of text, the way Hugging Face's Split pre-tokenizer walks its regex.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "mla/status.h"

namespace mla::tok {

struct Span {
  size_t begin = 0, end = 0;  // byte offsets, [begin, end)
};

class Regex {
 public:
  // `pattern` uses Oniguruma/PCRE syntax as in tokenizer.json; `literal` matches it verbatim (the
  // {"String": ...} form). `where` names the file and field for error messages.
  static Result<Regex> compile(std::string_view pattern, bool literal, std::string_view where);

  // Appends the matches in `subject` (valid UTF-8, already checked) to *out, in order. Lookaround
  // sees only `subject`. An empty match yields nothing and the search resumes one code point
  // later. Fails only when PCRE2 gives up (match or JIT stack limit), naming `where`.
  Status find_all(std::string_view subject, std::vector<Span>* out) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;  // immutable once compiled; shared by copies
  std::string pattern_;
  std::string where_;
};

}  // namespace mla::tok
