// Kimi chat formats against Moonshot AI's own templates rendered by transformers (the golden of
// tests/e2e/tokenizer/kimi_chat_oracle.py: kimi-k2-thinking on every case, kimi-k2 on the cases
// its July 2025 template renders as the current one does), the template's tojson spacing
// (python_json), <think> as a soft control part, recognition of the Thinking template.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tokenizer/chat_format.h"
#include "tokenizer/tokenizer_config.h"
#include "tokenizer_test_util.h"

namespace mla::tok {
namespace {

OrderedJson load_ordered_golden(const std::string& name) {
  Result<std::string> text = read_text_file(testing_util::data_path(name));
  EXPECT_TRUE(text.ok()) << text.status().to_string();
  if (!text.ok()) return OrderedJson();
  Result<OrderedJson> j = parse_ordered_json(*text, name);
  EXPECT_TRUE(j.ok()) << j.status().to_string();
  return j.ok() ? *j : OrderedJson();
}

TEST(KimiChatFormat, MatchesTheTemplatesThroughTransformers) {
  const OrderedJson golden = load_ordered_golden("kimi_chat_golden.json");
  ASSERT_TRUE(golden.contains("cases"));
  int per_format[2] = {0, 0};
  for (size_t i = 0; i < golden["cases"].size(); ++i) {
    const OrderedJson& c = golden["cases"][i];
    ChatOptions opts;
    Result<std::vector<ChatMessage>> m = parse_chat_messages(c, "golden", &opts);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    Result<ChatFormat> f = chat_format_from_name(c["format"].get<std::string>());
    ASSERT_TRUE(f.ok());
    ++per_format[*f == ChatFormat::kKimiK2Thinking];
    Result<std::vector<ChatPart>> parts = render_chat(*f, *m, opts);
    ASSERT_TRUE(parts.ok()) << parts.status().to_string();
    EXPECT_EQ(chat_text(*parts), c["text"].get<std::string>())
        << "case " << i << " (" << c["format"].get<std::string>() << ")";
  }
  EXPECT_GE(per_format[0], 10);  // kimi-k2
  EXPECT_GE(per_format[1], 20);  // kimi-k2-thinking
}

TEST(KimiChatFormat, PythonJsonSpacing) {
  const auto py = [](const char* text) { return python_json(*parse_ordered_json(text, "t")); };
  EXPECT_EQ(py(R"({"b":1,"a":[true,null,"x"],"c":{}})"),
            R"({"b": 1, "a": [true, null, "x"], "c": {}})");
  EXPECT_EQ(py(R"([[],{"k":{"z":-2.5,"y":1e-07}}])"), R"([[], {"k": {"z": -2.5, "y": 1e-07}}])");
  // ensure_ascii off: text as is; the escapes json.dumps uses for quotes and controls.
  EXPECT_EQ(py(R"({"s":"°C — \"q\" \\ \n\t\u0001"})"),
            "{\"s\": \"°C — \\\"q\\\" \\\\ \\n\\t\\u0001\"}");
  // Python's repr: positional up to an exponent of 15, shortest round-trip digits.
  EXPECT_EQ(py("[1.0, 100.0, 1e16, 1e15, -1.2345678901234567e15, 0.1, 1e-4, 1e-5, 1.5e300]"),
            "[1.0, 100.0, 1e+16, 1000000000000000.0, -1234567890123456.8, 0.1, 0.0001, 1e-05, "
            "1.5e+300]");
}

// 500 seeded random doubles, as json.dumps wrote them: python_json reads and writes them back
// the same (repr's notation switch at 1e-4 and 1e16, shortest correctly rounded digits).
TEST(KimiChatFormat, PythonJsonNumbersAsJsonDumps) {
  const OrderedJson golden = load_ordered_golden("kimi_chat_golden.json");
  ASSERT_TRUE(golden.contains("numbers"));
  const std::string text = golden["numbers"].get<std::string>();
  Result<OrderedJson> list = parse_ordered_json(text, "numbers");
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->size(), 500u);
  EXPECT_EQ(python_json(*list), text);
}

// Reasoning shows only after the last reply without tool calls; <think> is a soft control part
// (an added token where the tokenizer has it, text otherwise).
TEST(KimiChatFormat, ThinkingKeepsOnlyTheOpenTurnsReasoning) {
  std::vector<ChatMessage> m(4);
  m[0] = {"user", std::string("a"), {}, "", ""};
  m[1] = {"assistant", std::string("b"), {}, "", "", std::string("old thought")};
  m[2] = {"user", std::string("c"), {}, "", ""};
  m[3] = {"assistant", std::nullopt, {{"function", "f", "{}", "functions.f:0"}},
          "",          "",           std::string("new thought")};
  Result<std::vector<ChatPart>> parts = render_chat(ChatFormat::kKimiK2Thinking, m, {});
  ASSERT_TRUE(parts.ok());
  const std::string text = chat_text(*parts);
  EXPECT_EQ(text.find("old thought"), std::string::npos);
  EXPECT_NE(text.find("<|im_middle|><think>new thought</think><|tool_calls_section_begin|>"),
            std::string::npos);
  int soft = 0;
  for (const ChatPart& p : *parts) soft += p.soft;
  EXPECT_EQ(soft, 4);  // two <think></think> pairs
  // kimi-k2 shows no thought at all.
  parts = render_chat(ChatFormat::kKimiK2, m, {});
  ASSERT_TRUE(parts.ok());
  EXPECT_EQ(chat_text(*parts).find("think"), std::string::npos);
}

TEST(KimiChatFormat, ForcedCallClosesAnEmptyThought) {
  std::vector<ChatPart> prefix = forced_tool_call_prefix(ChatFormat::kKimiK2Thinking, "f");
  EXPECT_EQ(chat_text(prefix),
            "<think></think><|tool_calls_section_begin|><|tool_call_begin|>functions.f:0"
            "<|tool_call_argument_begin|>");
  EXPECT_TRUE(prefix[0].soft && prefix[1].soft && !prefix[2].soft);
}

TEST(KimiChatFormat, SoftControlIsTextWithoutTheAddedToken) {
  Result<Tokenizer> t = Tokenizer::from_file(testing_util::data_path("tiny_bytelevel.json"));
  ASSERT_TRUE(t.ok());
  const std::vector<ChatPart> soft = {{true, "<think>", true}};
  Result<std::vector<int32_t>> ids = encode_chat(*t, soft);
  ASSERT_TRUE(ids.ok()) << ids.status().to_string();
  EXPECT_EQ(*ids, *t->encode("<think>", {}));
  EXPECT_FALSE(encode_chat(*t, std::vector<ChatPart>{{true, "<think>", false}}).ok());
}

TEST(KimiChatFormat, RecognisesTheThinkingTemplate) {
  EXPECT_EQ(*detect_chat_format("<|im_assistant|>{{role_name}}<|im_middle|><think></think>"),
            ChatFormat::kKimiK2Thinking);
  EXPECT_EQ(*chat_format_from_name("kimi-k2-thinking"), ChatFormat::kKimiK2Thinking);
  EXPECT_TRUE(chat_format_has_tools(ChatFormat::kKimiK2Thinking));
}

TEST(KimiChatFormat, BadToolsAndReasoningAreErrorsNamingThem) {
  ChatOptions o;
  Result<OrderedJson> j = parse_ordered_json(
      R"({"messages": [{"role": "assistant", "content": "x", "reasoning_content": 3}]})", "m.json");
  ASSERT_TRUE(j.ok());
  Result<std::vector<ChatMessage>> p = parse_chat_messages(*j, "m.json", &o);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("reasoning_content"), std::string::npos);
  j = parse_ordered_json(R"({"messages": [], "tools": [1]})", "m.json");
  ASSERT_TRUE(j.ok());
  p = parse_chat_messages(*j, "m.json", &o);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("tools"), std::string::npos);
}

}  // namespace
}  // namespace mla::tok
