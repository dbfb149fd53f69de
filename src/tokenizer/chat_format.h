// Built-in chat formats (DeepSeek-V3, R1, V2, Kimi-K2, Moonlight, ChatML) written in C++ instead of
// running the Jinja template; the right one is recognised from tokenizer_config.json's
// chat_template text. Rendering keeps control tokens apart from message text, so that text a
// user typed is always encoded as plain text and only the formatter inserts control ids.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mla/status.h"
#include "tokenizer/json_read.h"
#include "tokenizer/tokenizer.h"

namespace mla::tok {

enum class ChatFormat {
  kDeepSeekV3,          // <｜User｜>/<｜Assistant｜>, system prompt first, tool calls
  kDeepSeekR1,          // V3 + reasoning dropped from history + generation prompt opens <think>
  kDeepSeekR1Original,  // the January 2025 R1 template: reasoning dropped, no forced <think>
  kDeepSeekV2,          // "User: ...\n\nAssistant: ...<｜end▁of▁sentence｜>"
  kKimiK2,              // <|im_user|>user<|im_middle|>...<|im_end|>, default system prompt
  kKimiK2Thinking,      // Kimi-K2's with <think>reasoning</think> before each assistant reply
  kMoonlight,           // Kimi's format with Moonlight-Instruct's default system prompt
  kChatMl,              // <|im_start|>role\n...<|im_end|>\n (MiniCPM3), no BOS, no default system
};

// "deepseek-v3", "deepseek-r1", "deepseek-r1-original", "deepseek-v2", "kimi-k2",
// "kimi-k2-thinking", "moonlight", "chatml".
std::string_view chat_format_name(ChatFormat f);
Result<ChatFormat> chat_format_from_name(std::string_view name);
// All names, comma-separated, for help and error text.
std::string chat_format_names();

// Recognises a Jinja chat template by content (the literal markers each family uses). An empty
// or unrecognised template is an error that lists the names --chat-format accepts.
Result<ChatFormat> detect_chat_format(std::string_view chat_template);

struct ToolCall {
  std::string type = "function";
  std::string name;
  std::string arguments;  // JSON text, inserted verbatim
  std::string id;         // Kimi renders it (functions.NAME:IDX); DeepSeek's formats do not
};

struct ChatMessage {
  std::string role;                    // system, user, assistant, tool
  std::optional<std::string> content;  // none: an assistant turn made only of tool calls
  std::vector<ToolCall> tool_calls;
  std::string name;          // Kimi: shown instead of the role when set
  std::string tool_call_id;  // role tool: the call it answers (Kimi: "## Return of ID")
  // An assistant turn's reasoning, as clients send back the reasoning_content of a reply: only
  // kimi-k2-thinking shows it (for the turns after the last reply without tool calls).
  std::optional<std::string> reasoning_content = std::nullopt;
};

struct ChatOptions {
  bool add_generation_prompt = true;  // end with the assistant prefix, ready to generate
  // The request's tools, each one OpenAI `tools` entry as compact JSON with the client's key
  // order ({"type":"function","function":{"name":...,"parameters":{...}}}). DeepSeek's formats
  // list them in the system prompt with the call syntax (docs/TOKENIZER.md §Tools), Kimi's in a
  // tool_declare turn first (as Python's json.dumps writes them). Formats without tool calls
  // refuse them.
  std::vector<std::string> tools;
  // A function the reply must call (tool_choice naming one): the prompt ends with the opening
  // of that call (forced_tool_call_prefix), so the model writes only its arguments.
  std::string forced_tool;
  // A call to one of the tools must come (tool_choice required): the prompt ends with the
  // opening of a call up to the function's name.
  bool force_tool_call = false;
};

// A rendered prompt: control parts are added-token texts (encoded to their ids); text parts are
// template literals and message contents (always encoded as plain text).
struct ChatPart {
  bool control = false;
  std::string text;
  // A control part that is plain text where the tokenizer lacks it as an added token, as a
  // Hugging Face tokenizer encodes a template literal (Kimi-K2-Thinking's <think>).
  bool soft = false;
};

Result<std::vector<ChatPart>> render_chat(ChatFormat f, std::span<const ChatMessage> messages,
                                          const ChatOptions& opts = {});

// True for formats with tool calls: DeepSeek-V3 / R1, Kimi-K2 (and -Thinking), Moonlight.
bool chat_format_has_tools(ChatFormat f);

// The opening of a call to `name` that ChatOptions::forced_tool appends to the prompt (after the
// generation prompt; R1 closes its thought first); with an empty name, the opening up to where
// the name goes (ChatOptions::force_tool_call). Its text is the start of the reply as the
// tool-call parser reads it.
std::vector<ChatPart> forced_tool_call_prefix(ChatFormat f, std::string_view name);

// The parts joined: the prompt text the Jinja template would produce.
std::string chat_text(std::span<const ChatPart> parts);

// Ids of a rendered prompt, with exactly one BOS (the format's own; none is added). A control
// part the tokenizer lacks as an added token is an error naming it.
Result<std::vector<int32_t>> encode_chat(const Tokenizer& t, std::span<const ChatPart> parts);

// Messages from JSON: a list of {"role", "content", "tool_calls"?, "name"?, "tool_call_id"?,
// "reasoning_content"?}, or an object {"messages": [...], "tools"?: [...],
// "add_generation_prompt"?: bool}. Call arguments given as a JSON value rather than a string
// become text as the templates' tojson writes them (python_json). `origin` names the file in
// errors.
Result<std::vector<ChatMessage>> parse_chat_messages(const OrderedJson& j, std::string_view origin,
                                                     ChatOptions* opts);

}  // namespace mla::tok
