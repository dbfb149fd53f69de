// The tool-calling fields of a chat request (docs/SERVING.md §Tool calling): `tools`,
// `tool_choice` and `parallel_tool_calls`, checked field by field and turned into what the prompt
// renderer (tok::ChatOptions::tools / forced_tool) and the reply parser need.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/api_error.h"
#include "server/openai_request.h"

namespace mla::server {

// At most this many tools in one request (OpenAI's limit).
inline constexpr size_t kMaxTools = 128;

// Fills spec->tools and opts->tools / forced_tool from the body. `raw_body` (the request's text)
// keeps each tool's keys in the client's order in the prompt; empty: sorted keys. 400 naming the
// field for: a tool that is not {"type": "function", "function": {"name", ...}}, a name outside
// [A-Za-z0-9_-]{1,64} or given twice, a tool_choice other than none / auto / required / a named
// tool of the list, `strict: true` and `required` with several tools (both need constrained
// decoding), and tools for a chat format without tool calls.
std::optional<ApiError> parse_tools(const nlohmann::json& body, std::string_view raw_body,
                                    const ServedModel& m, ToolRequest* out, tok::ChatOptions* opts);

}  // namespace mla::server
