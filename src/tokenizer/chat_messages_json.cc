// parse_chat_messages (chat_format.h): conversations from JSON files, for `mla chat-format` and
// the chat-format goldens. Keys keep the file's order, since tools and call arguments are shown to
// the model as text.
#include <fmt/format.h>

#include "tokenizer/chat_format.h"

namespace mla::tok {
namespace {

Result<std::optional<std::string>> optional_string(const OrderedJson& m, const char* key,
                                                   const std::string& where) {
  const auto it = m.find(key);
  if (it == m.end() || it->is_null()) return std::optional<std::string>();
  if (!it->is_string())
    return invalid_argument(
        fmt::format("{}.{}: expected a string or null, got {}", where, key, json_excerpt(*it)));
  return std::optional<std::string>(it->get<std::string>());
}

Result<std::vector<ToolCall>> parse_tool_calls(const OrderedJson& tc, const std::string& where) {
  if (!tc.is_array()) return invalid_argument(where + ": expected a list");
  std::vector<ToolCall> out;
  for (size_t k = 0; k < tc.size(); ++k) {
    const OrderedJson& call = tc[k];
    const std::string cw = fmt::format("{}[{}]", where, k);
    if (!call.is_object() || !call.contains("function") || !call["function"].is_object())
      return invalid_argument(cw + ": expected {\"type\", \"function\": {...}}");
    ToolCall t;
    if (call.contains("id") && call["id"].is_string()) t.id = call["id"].get<std::string>();
    if (call.contains("type") && call["type"].is_string()) t.type = call["type"].get<std::string>();
    const OrderedJson& fn = call["function"];
    MLA_ASSIGN_OR_RETURN(t.name, get_string(fn, "name", cw + ".function"));
    const auto args = fn.find("arguments");
    if (args == fn.end()) return invalid_argument(cw + ".function: \"arguments\" is missing");
    t.arguments = args->is_string() ? args->get<std::string>() : python_json(*args);
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace

Result<std::vector<ChatMessage>> parse_chat_messages(const OrderedJson& j, std::string_view origin,
                                                     ChatOptions* opts) {
  const OrderedJson* list = &j;
  if (j.is_object()) {
    if (!j.contains("messages"))
      return invalid_argument(fmt::format("{}: expected a \"messages\" list", origin));
    list = &j["messages"];
    MLA_ASSIGN_OR_RETURN(
        opts->add_generation_prompt,
        get_bool(j, "add_generation_prompt", opts->add_generation_prompt, std::string(origin)));
    if (const auto tools = j.find("tools"); tools != j.end() && !tools->is_null()) {
      if (!tools->is_array())
        return invalid_argument(fmt::format("{}: tools: expected a list", origin));
      for (const OrderedJson& t : *tools) {
        if (!t.is_object())
          return invalid_argument(
              fmt::format("{}: tools: expected objects, got {}", origin, json_excerpt(t)));
        opts->tools.push_back(t.dump(-1, ' ', false, OrderedJson::error_handler_t::replace));
      }
    }
  }
  if (!list->is_array())
    return invalid_argument(fmt::format("{}: messages: expected a list", origin));
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < list->size(); ++i) {
    const OrderedJson& m = (*list)[i];
    const std::string where = fmt::format("{}: messages[{}]", origin, i);
    if (!m.is_object()) return invalid_argument(where + ": expected an object");
    ChatMessage msg;
    MLA_ASSIGN_OR_RETURN(msg.role, get_string(m, "role", where));
    MLA_ASSIGN_OR_RETURN(msg.content, optional_string(m, "content", where));
    MLA_ASSIGN_OR_RETURN(msg.reasoning_content, optional_string(m, "reasoning_content", where));
    if (m.contains("name") && m["name"].is_string()) msg.name = m["name"].get<std::string>();
    if (m.contains("tool_call_id") && m["tool_call_id"].is_string())
      msg.tool_call_id = m["tool_call_id"].get<std::string>();
    if (const auto tc = m.find("tool_calls"); tc != m.end() && !tc->is_null()) {
      MLA_ASSIGN_OR_RETURN(msg.tool_calls, parse_tool_calls(*tc, where + ".tool_calls"));
    }
    out.push_back(std::move(msg));
  }
  return out;
}

}  // namespace mla::tok
