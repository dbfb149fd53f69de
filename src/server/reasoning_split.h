// DeepSeek-R1's reasoning in chat replies (docs/SERVING.md §Reasoning): the R1 chat formats end the
// prompt inside a thought (`<think>\n`, or the model opens it itself under the January 2025
// template), so a reply is reasoning up to the first `</think>` and content after it, as vLLM's
// deepseek_r1 reasoning parser splits it. A reply without `</think>` is all reasoning.
#pragma once

#include <string>
#include <string_view>

namespace mla::server {

class ReasoningSplitter {
 public:
  struct Parts {
    std::string reasoning, content;
  };
  // The next piece of the reply's text. A tail that may be the start of `<think>` or `</think>`
  // is held back until the next piece (or finish) decides it, so a streamed reply splits exactly
  // as the whole text does, wherever the pieces are cut.
  Parts feed(std::string_view text);
  // What was held back, at the end of the reply.
  Parts finish();

 private:
  enum class State { kStart, kReasoning, kContent };
  State state_ = State::kStart;
  std::string held_;
};

// The length of the longest suffix of s that is a proper prefix of tag (text a streamed parser
// holds back: it may become the tag). Shared with tool_call_parser.
size_t partial_tag_suffix(std::string_view s, std::string_view tag);

// The whole reply at once: feed(text) then finish().
ReasoningSplitter::Parts split_reasoning(std::string_view text);

}  // namespace mla::server
