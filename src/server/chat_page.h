// The chat page served at `GET /` (static HTML and JS from chat_page.html, embedded at build time).
#pragma once

#include <string_view>

namespace mla::server {

std::string_view chat_page_html();

}  // namespace mla::server
