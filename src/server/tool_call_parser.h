// Tool calls in chat replies (docs/SERVING.md §Tool calling): the model writes them in its own
// syntax after any plain content, and the parser turns them into OpenAI `tool_calls`.
//
// DeepSeek-V3 / R1:
//   <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\nARGS\n```
//   <｜tool▁call▁end｜> ... <｜tool▁calls▁end｜>
// Kimi-K2 / Moonlight:
//   <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>
//   ARGS<|tool_call_end|> ... <|tool_calls_section_end|>
//
// A call is returned only whole and valid: its arguments a JSON object, its name one of the
// request's tools. A malformed call (bad structure, invalid JSON, unknown name, or unterminated
// at the end of the reply) is returned as plain content, with a warning on stderr, never as a
// call and never as an error. Whitespace between content and a call section is dropped. A
// streamed reply and the same text parsed whole give the same content and calls, wherever the
// pieces are cut.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/chat_format.h"

namespace mla::server {

enum class ToolSyntax { kDeepSeek, kKimi };

// The syntax of a chat format's tool calls; none for formats without them (V2, ChatML).
std::optional<ToolSyntax> tool_syntax(tok::ChatFormat f);

struct ParsedToolCall {
  std::string id;         // Kimi: the model's own id (functions.NAME:IDX); DeepSeek: made here
  std::string name;       // the function's name
  std::string arguments;  // JSON object text, as the model wrote it
};

class ToolCallParser {
 public:
  struct Options {
    ToolSyntax syntax = ToolSyntax::kDeepSeek;
    std::vector<std::string> tool_names;  // the request's tools; calls to others are malformed
    bool parallel = true;                 // false: calls after the first are dropped (logged)
    std::string id_prefix = "call_";      // DeepSeek ids: id_prefix + call index
  };
  explicit ToolCallParser(Options o) : o_(std::move(o)) {}

  struct Parts {
    std::string content;                // plain text to show
    std::vector<ParsedToolCall> calls;  // calls completed in this piece, in order
  };
  // The next piece of the reply's text (after any reasoning is split off).
  Parts feed(std::string_view text);
  // The end of the reply: held-back text, and an unterminated call returned as content.
  Parts finish();
  // Calls returned so far (finish_reason "tool_calls" when > 0).
  int calls_returned() const { return returned_; }

 private:
  enum class State { kContent, kSection, kAfter };
  void parse_section(Parts* out);
  void accept_call(std::string_view raw, Parts* out);
  void reject(std::string_view raw, std::string_view why, Parts* out);
  void add_content(std::string_view text, Parts* out);

  Options o_;
  State state_ = State::kContent;
  std::string held_;     // content: a possible marker start, or trailing whitespace
  std::string section_;  // inside a section: text not yet parsed into calls
  int seen_ = 0;         // calls parsed (valid or not), for DeepSeek ids
  int returned_ = 0;
};

// The whole reply at once: feed(text) then finish().
ToolCallParser::Parts parse_tool_calls(const ToolCallParser::Options& o, std::string_view text);

}  // namespace mla::server
