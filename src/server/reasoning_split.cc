// ReasoningSplitter (reasoning_split.h).
#include "server/reasoning_split.h"

#include <algorithm>

namespace mla::server {
namespace {

constexpr std::string_view kOpen = "<think>", kClose = "</think>";

}  // namespace

size_t partial_tag_suffix(std::string_view s, std::string_view tag) {
  for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n)
    if (s.substr(s.size() - n) == tag.substr(0, n)) return n;
  return 0;
}

ReasoningSplitter::Parts ReasoningSplitter::feed(std::string_view text) {
  Parts out;
  if (state_ == State::kContent) {
    out.content.assign(text);
    return out;
  }
  held_.append(text);
  if (state_ == State::kStart) {
    // A `<think>` the model writes at the very start (after blank space) opens the thought the
    // template did not: dropped. Anything else starts the reasoning as it is.
    const size_t lead = held_.find_first_not_of(" \t\r\n");
    if (lead == std::string::npos) return out;
    const std::string_view rest = std::string_view(held_).substr(lead);
    if (rest.size() < kOpen.size() && kOpen.substr(0, rest.size()) == rest) return out;
    if (rest.substr(0, kOpen.size()) == kOpen) held_.erase(0, lead + kOpen.size());
    state_ = State::kReasoning;
  }
  const size_t close = held_.find(kClose);
  if (close != std::string::npos) {
    out.reasoning = held_.substr(0, close);
    out.content = held_.substr(close + kClose.size());
    held_.clear();
    state_ = State::kContent;
    return out;
  }
  const size_t keep = partial_tag_suffix(held_, kClose);
  out.reasoning = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

ReasoningSplitter::Parts ReasoningSplitter::finish() {
  Parts out;
  out.reasoning = std::move(held_);  // an unfinished thought, or blank space before it
  held_.clear();
  return out;
}

ReasoningSplitter::Parts split_reasoning(std::string_view text) {
  ReasoningSplitter s;
  ReasoningSplitter::Parts a = s.feed(text), b = s.finish();
  a.reasoning += b.reasoning;
  a.content += b.content;
  return a;
}

}  // namespace mla::server
