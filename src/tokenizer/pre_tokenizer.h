// The pre-tokenizer: a sequence of regex Splits ending in ByteLevel, cutting text into the pieces
// that BPE encodes one at a time. Mirrors Hugging Face's Split and ByteLevel steps; the byte to
// character mapping itself is left to BpeModel, which works on raw bytes.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mla/status.h"
#include "tokenizer/regex.h"

namespace mla::tok {

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct SplitStep {
  Regex regex;
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;  // the regex names the gaps; its matches are the text between them
};

// Pieces of one text segment. Each piece views either the segment or `storage` (after
// ByteLevel's add_prefix_space changed the text).
struct Pieces {
  std::vector<std::string_view> list;
  std::string storage;
};

class PreTokenizer {
 public:
  // `gpt2_regex` is ByteLevel's use_regex split, applied after add_prefix_space.
  PreTokenizer(std::vector<SplitStep> splits, bool add_prefix_space,
               std::optional<Regex> gpt2_regex)
      : splits_(std::move(splits)),
        add_prefix_space_(add_prefix_space),
        gpt2_regex_(std::move(gpt2_regex)) {}

  // Cuts `text` (valid UTF-8) into non-empty pieces, replacing out->list. Linear in the text for
  // the DeepSeek patterns (PCRE2 JIT, no recursion on long runs).
  Status split(std::string_view text, Pieces* out) const;

 private:
  std::vector<SplitStep> splits_;
  bool add_prefix_space_ = false;
  std::optional<Regex> gpt2_regex_;
};

// The pattern ByteLevel uses when use_regex is true (GPT-2's word splitter).
extern const char* const kGpt2Pattern;

}  // namespace mla::tok
