#include "server/request_checks.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "server/body_framing.h"

namespace mla::server {
namespace {

struct Route {
  const char* path;
  const char* method;
  bool is_public;       // answered without the API key
  bool needs_model;     // 503 until the model is loaded
  bool prefix = false;  // path is a prefix: "/v1/models/" takes "/v1/models/{id}"
};
constexpr Route kRoutes[] = {
    {"/v1/chat/completions", "POST", false, true},
    {"/v1/completions", "POST", false, true},
    {"/v1/models", "GET", false, true},
    {"/v1/models/", "GET", false, true, true},
    {"/tokenize", "POST", false, true},
    {"/detokenize", "POST", false, true},
    {"/metrics", "GET", false, true},
    {"/health", "GET", true, false},
    {"/", "GET", true, false},
};

// Equal strings, in time that depends only on their lengths (the key is never leaked by timing).
bool constant_time_equal(std::string_view a, std::string_view b) {
  unsigned diff = a.size() != b.size() ? 1u : 0u;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const auto x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0u;
    const auto y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0u;
    diff |= unsigned(x ^ y);
  }
  return diff == 0;
}

// Header limits of docs/RELIABILITY.md §Checklist R36 (the library itself refuses single lines over
// 8 KiB with 400 and request lines over 8 KiB with 414).
constexpr size_t kMaxHeaderCount = 100;
constexpr size_t kMaxHeaderBytes = 16 << 10;

bool path_matches(const Route& r, const std::string& path) {
  const std::string_view p(r.path);
  return r.prefix ? path.size() > p.size() && path.compare(0, p.size(), p) == 0 : path == p;
}

// The Access-Control-Allow-Origin value for this request's Origin, or "" (no CORS headers).
std::string allowed_origin(const ServerOptions& o, const std::string& origin) {
  if (origin.empty()) return "";
  for (const std::string& a : o.allowed_origins) {
    if (a == "*") return "*";
    if (a == origin) return origin;
  }
  return "";
}

}  // namespace

bool declares_body(const httplib::Request& req) {
  return req.has_header("Transfer-Encoding") ||
         (req.has_header("Content-Length") && req.get_header_value("Content-Length") != "0");
}

ApiError status_error(int status, std::string type, std::string message, std::string code) {
  ApiError e;
  e.status = status;
  e.type = std::move(type);
  e.message = std::move(message);
  e.code = std::move(code);
  return e;
}

std::string loggable(std::string_view s) {
  std::string out;
  for (char ch : s.substr(0, 200)) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f)
      out += fmt::format("\\x{:02x}", c);
    else
      out += char(c);
  }
  if (s.size() > 200) out += "...";
  return out;
}

httplib::Server::HandlerResponse check_request(HttpServer::State& st, const httplib::Request& req,
                                               httplib::Response& res) {
  using HR = httplib::Server::HandlerResponse;
  // Refusing a request that declared a body: the body stays unread (see the header).
  auto reject = [&](const ApiError& e) {
    send_error(res, e);
    if (req.method == "HEAD") res.body.clear();
    if (declares_body(req)) res.set_header("Connection", "close");  // see the header
    return HR::Handled;
  };
  if (st.deadlines) st.deadlines->headers_received(req.remote_addr, req.remote_port);
  size_t header_bytes = 0;
  for (const auto& [name, value] : req.headers) header_bytes += name.size() + value.size() + 4;
  if (req.headers.size() > kMaxHeaderCount || header_bytes > kMaxHeaderBytes) {
    return reject(status_error(
        431, "invalid_request_error",
        fmt::format("the request has {} headers of {} bytes; at most {} "
                    "headers of {} bytes in all are accepted",
                    req.headers.size(), header_bytes, kMaxHeaderCount, kMaxHeaderBytes),
        "request_header_fields_too_large"));
  }
  // CORS: an allowed Origin sees every answer, errors included.
  const std::string origin = req.get_header_value("Origin");
  const std::string cors = allowed_origin(st.options, origin);
  const auto& allowed = st.options.allowed_origins;
  if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), "*") == allowed.end())
    res.set_header("Vary", "Origin");  // the answer depends on it: shared caches must not mix
  if (!cors.empty()) {
    res.set_header("Access-Control-Allow-Origin", cors);
    res.set_header("Access-Control-Expose-Headers", "Retry-After");
  }
  const Route* route = nullptr;
  const Route* known = nullptr;
  for (const Route& r : kRoutes)
    if (path_matches(r, req.path)) {
      known = &r;
      if (req.method == r.method || (req.method == "HEAD" && std::string_view(r.method) == "GET"))
        route = &r;
    }
  if (!known) {
    return reject(
        status_error(404, "not_found_error",
                     fmt::format("no route {} {}", loggable(req.method), loggable(req.path))));
  }
  if (req.method == "OPTIONS") {  // a CORS preflight: answered before the API key is asked for
    if (!origin.empty() && cors.empty())
      return reject(status_error(
          403, "permission_error",
          fmt::format("origin {} is not allowed (mla serve --allowed-origins)", loggable(origin)),
          "cors_origin_not_allowed"));
    res.status = 204;
    if (declares_body(req)) res.set_header("Connection", "close");  // see the header
    res.set_header("Allow", std::string(known->method) + ", OPTIONS");
    if (!cors.empty()) {
      res.set_header("Access-Control-Allow-Methods", std::string(known->method) + ", OPTIONS");
      // The headers the page asks for, when they are plain header names (browser SDKs add
      // their own, e.g. x-stainless-*), else the two the API needs.
      std::string asked = req.get_header_value("Access-Control-Request-Headers");
      const bool plain = !asked.empty() && asked.size() <= 1024 &&
                         std::all_of(asked.begin(), asked.end(), [](char c) {
                           return std::isalnum(static_cast<unsigned char>(c)) || c == '-' ||
                                  c == '_' || c == ',' || c == ' ';
                         });
      res.set_header("Access-Control-Allow-Headers",
                     plain ? asked : std::string("Authorization, Content-Type"));
      res.set_header("Access-Control-Max-Age", "600");
    }
    return HR::Handled;
  }
  if (!route) {
    for (const Route& r : kRoutes)
      if (path_matches(r, req.path)) res.set_header("Allow", r.method);
    return reject(
        status_error(405, "invalid_request_error",
                     fmt::format("method {} is not allowed on {}", loggable(req.method), req.path),
                     "method_not_allowed"));
  }
  if (req.has_header("Transfer-Encoding") && req.has_header("Content-Length")) {
    return reject(bad_request("",
                              "a request must not carry both Transfer-Encoding and "
                              "Content-Length"));
  }
  if (auto e = check_body_framing(req)) return reject(*e);  // a body the library cannot cap
  if (req.has_header("Content-Length")) {
    // The library would read (and drop) an oversized body before answering: 413 now, unread.
    const uint64_t n = std::strtoull(req.get_header_value("Content-Length").c_str(), nullptr, 10);
    if (n > st.options.max_body_bytes)
      return reject(
          status_error(413, "invalid_request_error",
                       fmt::format("the request body has {} bytes, more than the {} accepted", n,
                                   st.options.max_body_bytes),
                       "payload_too_large"));
  }
  const std::string enc = req.get_header_value("Content-Encoding");
  if (!enc.empty() && enc != "identity") {
    return reject(status_error(415, "invalid_request_error",
                               fmt::format("Content-Encoding {} is not accepted; send the body "
                                           "uncompressed",
                                           loggable(enc)),
                               "unsupported_media_type"));
  }
  const bool open = route->is_public || (std::string_view(route->path) == "/metrics" &&
                                         !st.options.metrics_require_key);
  if (!open && !st.options.api_key.empty()) {
    const std::string auth = req.get_header_value("Authorization");
    constexpr std::string_view kBearer = "Bearer ";
    const bool ok =
        auth.size() > kBearer.size() && auth.compare(0, kBearer.size(), kBearer) == 0 &&
        constant_time_equal(std::string_view(auth).substr(kBearer.size()), st.options.api_key);
    if (!ok) {
      return reject(status_error(401, "authentication_error",
                                 auth.empty() ? "missing API key: send Authorization: Bearer KEY"
                                              : "incorrect API key provided",
                                 "invalid_api_key"));
    }
  }
  if (route->needs_model && (st.draining.load() || !st.ready.load())) {
    res.set_header("Retry-After", "1");
    return reject(status_error(
        503, "service_unavailable",
        st.draining.load() ? "the server is shutting down" : "the model is still loading"));
  }
  return HR::Unhandled;
}

}  // namespace mla::server
