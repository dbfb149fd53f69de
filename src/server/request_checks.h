// The checks every request passes before the library reads its body or a route sees it
// (docs/RELIABILITY.md §Checklist R35, R36, R42, R44): header limits, route and method, body
// framing and size, encoding, the API key, readiness. A request refused here that declared a body
// is answered with Connection: close, which ends its connection once the answer is written
// (http_connection.h): the body is never parsed (a 100 MiB upload costs at most the short
// lingering close and cannot be taken for the next request).
#pragma once

#include <httplib.h>

#include <string>
#include <string_view>

#include "server/api_error.h"
#include "server/server_state.h"

namespace mla::server {

// The server's pre-routing handler: Handled (with the error in `res`) or Unhandled.
httplib::Server::HandlerResponse check_request(HttpServer::State& st, const httplib::Request& req,
                                               httplib::Response& res);

// The request announces a body (Content-Length > 0 or Transfer-Encoding).
bool declares_body(const httplib::Request& req);

ApiError status_error(int status, std::string type, std::string message, std::string code = "");

// A log line that stays one line: control bytes escaped, cut at 200 bytes.
std::string loggable(std::string_view s);

}  // namespace mla::server
