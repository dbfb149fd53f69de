// Added tokens (special and not) and the leftmost-longest matcher that finds their text in raw
// input, as Hugging Face's AddedVocabulary does with Aho-Corasick before pre-tokenisation.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mla::tok {

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = false;  // a control token: skipped by decode(skip_special)
  bool lstrip = false;   // a match also swallows the whitespace before it
  bool rstrip = false;   // ... and after it
  bool normalized = false;
};

// A segment of input: either text for the normal pipeline or an added token's id.
struct Segment {
  std::string_view text;
  int32_t id = -1;  // >= 0: an added token
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  explicit AddedTokenMatcher(const std::vector<AddedToken>& tokens);

  // Cuts `text` into segments: at each step the earliest match, the longest among those starting
  // there, then lstrip/rstrip applied. Appends to *out; empty text segments are not emitted.
  // O(n · longest token) worst case, O(n) scanning when no token can start.
  void split(std::string_view text, std::vector<Segment>* out) const;

  bool empty() const { return tokens_.empty(); }

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;  // sorted by byte
    int32_t token = -1;                                 // index into tokens_ ending here
  };
  int32_t child(int32_t node, uint8_t b) const;
  // Length and token index of the longest match starting at text[i], or {0, -1}.
  std::pair<size_t, int32_t> longest_at(std::string_view text, size_t i) const;

  std::vector<AddedToken> tokens_;
  std::vector<Node> nodes_;
  bool first_byte_[256] = {};
};

}  // namespace mla::tok
