// Prompts of OpenAI requests as token ids: chat `messages` rendered by the model's chat format
// (control tokens only from the formatter, message text always plain text), and completions'
// `prompt` as a string, strings, token ids or lists of token ids.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "server/api_error.h"
#include "server/openai_request.h"

namespace mla::server {

// messages → prompt ids (with the generation prompt). 400 naming messages[i].<field> for an empty
// list, an unknown role, missing content, unsupported content parts (images, audio).
// `opts` carries the tools and a forced call (openai_tools.h).
std::optional<ApiError> chat_prompt(const nlohmann::json& body, const ServedModel& m,
                                    const tok::ChatOptions& opts, std::vector<int32_t>* ids);

// prompt → one id list per prompt (at most kMaxPrompts), and each prompt's text (for echo).
// Strings get BOS when the tokenizer config says so; ids are checked against the logits width.
std::optional<ApiError> completion_prompts(const nlohmann::json& body, const ServedModel& m,
                                           std::vector<std::vector<int32_t>>* prompts,
                                           std::vector<std::string>* texts);

}  // namespace mla::server
