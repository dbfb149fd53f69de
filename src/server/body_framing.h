// Body framing the server accepts before cpp-httplib reads a body (call from the pre-routing
// handler, which runs before the library reads it). cpp-httplib 0.11.4 caps only bodies with a
// Content-Length (set_payload_max_length): a chunked body, or one with neither header (read to
// EOF), grows without bound, and a Content-Length such as "B 2" parses as 0, leaving the body's
// bytes to be read as the next request. Found by fuzz/fuzz_http_parser.cc (docs/RELIABILITY.md
// §Checklist R35).
#pragma once

#include <httplib.h>

#include <optional>

#include "server/api_error.h"

namespace mla::server {

// For a request the library would read a body for (POST, PUT, PATCH, DELETE, PRI): 411
// length_required when it has a Transfer-Encoding (any: a chunked body cannot be capped) or no
// Content-Length; 400 when the Content-Length is not 1 to 19 decimal digits or appears twice.
// nullopt otherwise (also for GET and HEAD, whose bodies the library ignores).
std::optional<ApiError> check_body_framing(const httplib::Request& req);

}  // namespace mla::server
