// Tool calls out of chat replies (server/tool_call_parser.h), on the exact texts the models write:
// DeepSeek-V3 / R1 (<｜tool▁calls▁begin｜> … function<｜tool▁sep｜>NAME + a ```json block) and
// Kimi-K2 (<|tool_calls_section_begin|> … functions.NAME:IDX<|tool_call_argument_begin|>ARGS).
// Malformed calls come back as content, never as calls; a streamed reply cut anywhere parses as
// the whole; the reasoning split composes with it (reply_parser.h).
#include "server/tool_call_parser.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/reply_parser.h"

namespace mla::server {
namespace {

const std::string kDsBegin = "<｜tool▁calls▁begin｜>", kDsEnd = "<｜tool▁calls▁end｜>",
                  kDsCall = "<｜tool▁call▁begin｜>", kDsCallEnd = "<｜tool▁call▁end｜>",
                  kDsSep = "<｜tool▁sep｜>";

std::string ds_call(const std::string& name, const std::string& args) {
  return kDsCall + "function" + kDsSep + name + "\n```json\n" + args + "\n```" + kDsCallEnd;
}

std::string kimi_call(const std::string& id, const std::string& args) {
  return "<|tool_call_begin|>" + id + "<|tool_call_argument_begin|>" + args + "<|tool_call_end|>";
}

ToolCallParser::Options ds(std::vector<std::string> names = {"get_weather", "get_time"}) {
  ToolCallParser::Options o;
  o.syntax = ToolSyntax::kDeepSeek;
  o.tool_names = std::move(names);
  o.id_prefix = "call_t_";
  return o;
}

ToolCallParser::Options kimi() {
  ToolCallParser::Options o = ds();
  o.syntax = ToolSyntax::kKimi;
  return o;
}

TEST(ToolCallParser, DeepSeekCalls) {
  const std::string text = "Let me check." + std::string("\n\n") + kDsBegin +
                           ds_call("get_weather", R"({"location": "Tokyo"})") + "\n" +
                           ds_call("get_time", R"({"tz": "Asia/Tokyo", "fmt": {"h": 24}})") +
                           kDsEnd;
  const ToolCallParser::Parts p = parse_tool_calls(ds(), text);
  EXPECT_EQ(p.content, "Let me check.");  // the blank space before the section is dropped
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].id, "call_t_0");
  EXPECT_EQ(p.calls[0].name, "get_weather");
  EXPECT_EQ(p.calls[0].arguments, R"({"location": "Tokyo"})");
  EXPECT_EQ(p.calls[1].id, "call_t_1");
  EXPECT_EQ(p.calls[1].name, "get_time");
  EXPECT_EQ(p.calls[1].arguments, R"({"tz": "Asia/Tokyo", "fmt": {"h": 24}})");
}

TEST(ToolCallParser, KimiCalls) {
  const std::string text = "<|tool_calls_section_begin|>" +
                           kimi_call("functions.get_weather:0", R"({"city": "Beijing"})") +
                           kimi_call("functions.get_weather:1", R"({"city": "Shanghai"})") +
                           "<|tool_calls_section_end|>";
  const ToolCallParser::Parts p = parse_tool_calls(kimi(), text);
  EXPECT_EQ(p.content, "");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].id, "functions.get_weather:0");  // the model's own id, as vLLM returns it
  EXPECT_EQ(p.calls[0].name, "get_weather");
  EXPECT_EQ(p.calls[1].id, "functions.get_weather:1");
  EXPECT_EQ(p.calls[1].arguments, R"({"city": "Shanghai"})");
}

TEST(ToolCallParser, PlainRepliesAreUntouched) {
  for (const std::string text : {"", "Hello!  \n", "a < b and <｜tool▁call", "  x  \n\n  y\n",
                                 "<|tool_calls_section_begin|> is Kimi's, not DeepSeek's"}) {
    const ToolCallParser::Parts p = parse_tool_calls(ds(), text);
    EXPECT_EQ(p.content, text);
    EXPECT_TRUE(p.calls.empty());
  }
}

// Each malformed call comes back as its own text; good calls beside it still count.
TEST(ToolCallParser, MalformedCallsAreContent) {
  struct Case {
    std::string name, text, content;
    size_t calls;
  };
  const std::string good = ds_call("get_time", "{}");
  const std::string bad_json = ds_call("get_weather", R"({"location": "Tok)");
  const std::string not_object = ds_call("get_weather", "[1, 2]");
  const std::string unknown = ds_call("rm_rf", "{}");
  const std::string no_sep = kDsCall + "get_weather\n```json\n{}\n```" + kDsCallEnd;
  const std::string no_fence_end =
      kDsCall + "function" + kDsSep + "get_time\n```json\n{}" + kDsCallEnd;
  const std::string deep = ds_call("get_time", std::string(5000, '[') + std::string(5000, ']'));
  const std::string unterminated = kDsCall + "function" + kDsSep + "get_time\n```json\n{\"a\":";
  for (const Case& c : std::vector<Case>{
           {"invalid JSON", kDsBegin + bad_json + good + kDsEnd, bad_json, 1},
           {"not an object", kDsBegin + not_object + kDsEnd, not_object, 0},
           {"unknown function", kDsBegin + good + unknown + kDsEnd, unknown, 1},
           {"no separator", kDsBegin + no_sep + kDsEnd, no_sep, 0},
           {"unclosed fence", kDsBegin + no_fence_end + kDsEnd, no_fence_end, 0},
           {"nested past the limit", kDsBegin + deep + kDsEnd, deep, 0},
           {"unterminated call", "Hi " + kDsBegin + good + unterminated, "Hi" + unterminated, 1},
           {"call without its end", kDsBegin + kDsCall + "function" + kDsSep + "x" + good + kDsEnd,
            kDsCall + "function" + kDsSep + "x", 1},
           {"text between calls", kDsBegin + good + "oops" + good + kDsEnd, "oops", 2},
       }) {
    const ToolCallParser::Parts p = parse_tool_calls(ds(), c.text);
    EXPECT_EQ(p.content, c.content) << c.name;
    EXPECT_EQ(p.calls.size(), c.calls) << c.name;
  }
}

TEST(ToolCallParser, ParallelFalseKeepsTheFirstCall) {
  ToolCallParser::Options o = ds();
  o.parallel = false;
  const ToolCallParser::Parts p = parse_tool_calls(
      o, kDsBegin + ds_call("get_time", "{}") + ds_call("get_weather", "{}") + kDsEnd);
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].name, "get_time");
  EXPECT_EQ(p.content, "");
}

// Streamed in two or three pieces, cut at every byte, a reply gives the whole reply's parse.
TEST(ToolCallParser, StreamedPiecesParseAsTheWhole) {
  const std::vector<std::pair<ToolCallParser::Options, std::string>> replies = {
      {ds(), "Sure. " + kDsBegin + ds_call("get_weather", R"({"q": "é"})") + "\n" +
                 ds_call("get_time", "{}") + kDsEnd},
      {ds(), "x " + kDsBegin + ds_call("get_weather", "{bad") + kDsEnd + " after"},
      {ds(), "ends inside " + kDsBegin + kDsCall + "function"},
      {kimi(), "ok <|tool_calls_section_begin|>" + kimi_call("functions.get_time:0", "{}") +
                   "<|tool_calls_section_end|>"},
  };
  for (const auto& [opts, text] : replies) {
    const ToolCallParser::Parts whole = parse_tool_calls(opts, text);
    for (size_t a = 0; a <= text.size(); ++a)
      for (size_t b = a; b <= text.size(); b += 7) {
        ToolCallParser p(opts);
        ToolCallParser::Parts got;
        for (std::string_view piece :
             {std::string_view(text).substr(0, a), std::string_view(text).substr(a, b - a),
              std::string_view(text).substr(b)}) {
          ToolCallParser::Parts part = p.feed(piece);
          got.content += part.content;
          for (auto& c : part.calls) got.calls.push_back(c);
        }
        ToolCallParser::Parts rest = p.finish();
        got.content += rest.content;
        for (auto& c : rest.calls) got.calls.push_back(c);
        ASSERT_EQ(got.content, whole.content) << text << " cut at " << a << ", " << b;
        ASSERT_EQ(got.calls.size(), whole.calls.size()) << text << " cut at " << a << ", " << b;
        for (size_t k = 0; k < got.calls.size(); ++k) {
          EXPECT_EQ(got.calls[k].arguments, whole.calls[k].arguments);
          EXPECT_EQ(got.calls[k].id, whole.calls[k].id);
        }
      }
  }
}

// R1: reasoning first, then content and calls; a forced call's opening (which the prompt holds)
// is read as the reply's start.
TEST(ReplyParser, ReasoningThenToolCalls) {
  ReplyOptions o;
  o.reasoning = true;
  o.tools = ds();
  int calls = 0;
  ReplyParser::Parts p = parse_reply(
      o, "I should look it up.</think>\n\n" + kDsBegin + ds_call("get_weather", "{}") + kDsEnd,
      &calls);
  EXPECT_EQ(p.reasoning, "I should look it up.");
  EXPECT_EQ(p.content, "");
  EXPECT_EQ(calls, 1);

  o.forced_prefix =
      "</think>\n\n" + kDsBegin + kDsCall + "function" + kDsSep + "get_time\n```json\n";
  p = parse_reply(o,
                  R"({"tz": "UTC"})"
                  "\n```" +
                      kDsCallEnd + kDsEnd,
                  &calls);
  EXPECT_EQ(p.reasoning, "");
  EXPECT_EQ(p.content, "");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].name, "get_time");
  EXPECT_EQ(p.calls[0].arguments, R"({"tz": "UTC"})");
  // The forced call's arguments never closed: all of it is content.
  p = parse_reply(o, R"({"tz": )", &calls);
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(p.content, kDsCall + "function" + kDsSep + "get_time\n```json\n{\"tz\": ");
}

}  // namespace
}  // namespace mla::server
