// The checks every request passes before the library reads its body or a route sees it
// (docs/RELIABILITY.md §Checklist R35, R36, R42, R44): header limits, route and method, body
// framing and size, encoding, the API key, readiness. A request refused here that declared a body
// is answered with Connection: close, and once the answer is written (body_refused, from the
// logger) its connection's read side is shut down: the body is never read (a 100 MiB upload costs
// nothing and cannot be taken for the next request).
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

// The response refused a body the request declared: its connection is read no further.
bool refuses_body(const httplib::Request& req, const httplib::Response& res);

// After the response to a request is written: stops reading its connection when refuses_body.
void body_refused(const httplib::Request& req, const httplib::Response& res);

ApiError status_error(int status, std::string type, std::string message, std::string code = "");

// A log line that stays one line: control bytes escaped, cut at 200 bytes.
std::string loggable(std::string_view s);

}  // namespace mla::server
