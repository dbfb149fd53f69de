// The R1 reasoning split (server/reasoning_split.h) against vLLM's deepseek_r1 parser's stated
// rules: reasoning up to the first </think>, content after it (empty: none), a leading <think>
// dropped, no </think>: all reasoning; and a streamed reply, cut anywhere, splits as the whole.
#include "server/reasoning_split.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace mla::server {
namespace {

TEST(ReasoningSplit, WholeReplies) {
  struct Case {
    std::string text, reasoning, content;
  };
  for (const Case& c : std::vector<Case>{
           {"Let me think.\n</think>\n\nThe answer is 4.", "Let me think.\n",
            "\n\nThe answer is 4."},
           {"<think>\nSo 2+2.</think>4", "\nSo 2+2.", "4"},  // the model opened it itself
           {"  \n<think>a</think>b", "a", "b"},
           {"no end tag at all", "no end tag at all", ""},  // cut short: all reasoning
           {"</think>only content", "", "only content"},
           {"a</think>b</think>c", "a", "b</think>c"},    // the first one ends the thought
           {"x <think> y</think>z", "x <think> y", "z"},  // <think> not at the start stays
           {"", "", ""},
           {"</thin", "</thin", ""},  // a tag begun and never finished is text
           {"<thi", "<thi", ""},
       }) {
    const ReasoningSplitter::Parts p = split_reasoning(c.text);
    EXPECT_EQ(p.reasoning, c.reasoning) << c.text;
    EXPECT_EQ(p.content, c.content) << c.text;
  }
}

// Every way of cutting a reply into two or three pieces gives the whole reply's split.
TEST(ReasoningSplit, StreamedPiecesSplitAsTheWhole) {
  for (const std::string text :
       {"<think>\nHmm, 7 * 6.</think>\n\n42", "  <think>x</think>", "abc</think", "a</think>b"}) {
    const ReasoningSplitter::Parts whole = split_reasoning(text);
    for (size_t i = 0; i <= text.size(); ++i)
      for (size_t j = i; j <= text.size(); ++j) {
        ReasoningSplitter s;
        std::string reasoning, content;
        for (ReasoningSplitter::Parts p : {s.feed(text.substr(0, i)), s.feed(text.substr(i, j - i)),
                                           s.feed(text.substr(j)), s.finish()}) {
          reasoning += p.reasoning;
          content += p.content;
        }
        EXPECT_EQ(reasoning, whole.reasoning) << text << " cut at " << i << ", " << j;
        EXPECT_EQ(content, whole.content) << text << " cut at " << i << ", " << j;
      }
  }
}

}  // namespace
}  // namespace mla::server
