// Added-token trie and segmenting (see added_tokens.h).
#include "tokenizer/added_tokens.h"

#include <algorithm>

#include "tokenizer/utf8.h"

namespace mla::tok {

AddedTokenMatcher::AddedTokenMatcher(const std::vector<AddedToken>& tokens) : tokens_(tokens) {
  nodes_.emplace_back();
  for (size_t t = 0; t < tokens_.size(); ++t) {
    const std::string& c = tokens_[t].content;
    if (c.empty()) continue;
    first_byte_[static_cast<uint8_t>(c[0])] = true;
    int32_t node = 0;
    for (char ch : c) {
      const auto b = static_cast<uint8_t>(ch);
      int32_t next = child(node, b);
      if (next < 0) {
        next = static_cast<int32_t>(nodes_.size());
        auto& kids = nodes_[node].children;
        kids.insert(std::lower_bound(kids.begin(), kids.end(), std::make_pair(b, int32_t{0})),
                    {b, next});
        nodes_.emplace_back();
      }
      node = next;
    }
    if (nodes_[node].token < 0) nodes_[node].token = static_cast<int32_t>(t);
  }
}

int32_t AddedTokenMatcher::child(int32_t node, uint8_t b) const {
  const auto& kids = nodes_[node].children;
  const auto it = std::lower_bound(kids.begin(), kids.end(), std::make_pair(b, int32_t{0}));
  return it != kids.end() && it->first == b ? it->second : -1;
}

std::pair<size_t, int32_t> AddedTokenMatcher::longest_at(std::string_view text, size_t i) const {
  std::pair<size_t, int32_t> best{0, -1};
  int32_t node = 0;
  for (size_t k = i; k < text.size(); ++k) {
    node = child(node, static_cast<uint8_t>(text[k]));
    if (node < 0) break;
    if (nodes_[node].token >= 0) best = {k + 1 - i, nodes_[node].token};
  }
  return best;
}

void AddedTokenMatcher::split(std::string_view text, std::vector<Segment>* out) const {
  size_t emitted = 0;  // text before this offset is already in *out
  size_t i = 0;
  while (i < text.size()) {
    if (!first_byte_[static_cast<uint8_t>(text[i])]) {
      ++i;
      continue;
    }
    const auto [len, t] = longest_at(text, i);
    if (t < 0) {
      ++i;
      continue;
    }
    const AddedToken& tok = tokens_[t];
    size_t begin = i, end = i + len;
    if (tok.lstrip) {
      // Whitespace already taken by the previous match stays with it.
      while (begin > emitted) {
        size_t prev = 0;
        if (!is_unicode_whitespace(utf8_prev(text, begin, &prev))) break;
        begin = prev;
      }
    }
    if (tok.rstrip) {
      while (end < text.size()) {
        size_t next = end;
        if (!is_unicode_whitespace(utf8_next(text, &next))) break;
        end = next;
      }
    }
    if (begin > emitted) out->push_back({text.substr(emitted, begin - emitted), -1});
    out->push_back({std::string_view(), tok.id});
    emitted = end;
    i = end;  // Hugging Face resumes at the match end; the same unless a token starts with a space
  }
  if (emitted < text.size()) out->push_back({text.substr(emitted), -1});
}

}  // namespace mla::tok
