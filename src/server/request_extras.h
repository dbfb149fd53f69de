// Request fields other servers take that this one checks and does not apply, and vLLM's
// extensions it refuses unless they ask for the default (docs/SERVING.md §Request fields).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>

#include "server/api_error.h"

namespace mla::server {

std::optional<ApiError> check_accepted_extras(const nlohmann::json& body);

}  // namespace mla::server
