// HttpServer: the cpp-httplib server, its limits, the checks every request passes before a route
// sees it (route and method, body encoding, authentication, readiness), and the lifecycle.
#include "server/http_server.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

#include "server/body_framing.h"
#include "server/server_state.h"
#include "server/worker_pool.h"

namespace mla::server {
namespace {

using nlohmann::json;

struct Route {
  const char* path;
  const char* method;
  bool is_public;    // answered without the API key
  bool needs_model;  // 503 until the model is loaded
};
constexpr Route kRoutes[] = {
    {"/v1/chat/completions", "POST", false, true},
    {"/v1/completions", "POST", false, true},
    {"/v1/models", "GET", false, true},
    {"/tokenize", "POST", false, true},
    {"/detokenize", "POST", false, true},
    {"/metrics", "GET", false, true},
    {"/health", "GET", true, false},
    {"/", "GET", true, false},
};

// Equal strings, in time that depends only on their lengths (the key is never leaked by timing).
bool constant_time_equal(std::string_view a, std::string_view b) {
  unsigned diff = unsigned(a.size() ^ b.size());
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? a[i] : 0, y = i < b.size() ? b[i] : 0;
    diff |= unsigned(x ^ y);
  }
  return diff == 0;
}

ApiError status_error(int status, std::string type, std::string message, std::string code = "") {
  ApiError e;
  e.status = status;
  e.type = std::move(type);
  e.message = std::move(message);
  e.code = std::move(code);
  return e;
}

// A log line that stays one line: control bytes escaped, cut at 200 bytes.
std::string loggable(std::string_view s) {
  std::string out;
  for (unsigned char c : s.substr(0, 200)) {
    if (c < 0x20 || c == 0x7f)
      out += fmt::format("\\x{:02x}", c);
    else
      out += char(c);
  }
  if (s.size() > 200) out += "...";
  return out;
}

// Header limits of reliability.md §4 item 36 (the library itself refuses single lines over 8 KiB
// with 400 and request lines over 8 KiB with 414).
constexpr size_t kMaxHeaderCount = 100;
constexpr size_t kMaxHeaderBytes = 16 << 10;

httplib::Server::HandlerResponse check_request(HttpServer::State& st, const httplib::Request& req,
                                               httplib::Response& res) {
  using HR = httplib::Server::HandlerResponse;
  if (st.deadlines) st.deadlines->headers_received(req.remote_addr, req.remote_port);
  size_t header_bytes = 0;
  for (const auto& [name, value] : req.headers) header_bytes += name.size() + value.size() + 4;
  if (req.headers.size() > kMaxHeaderCount || header_bytes > kMaxHeaderBytes) {
    send_error(res, status_error(431, "invalid_request_error",
                                 fmt::format("the request has {} headers of {} bytes; at most {} "
                                             "headers of {} bytes in all are accepted",
                                             req.headers.size(), header_bytes, kMaxHeaderCount,
                                             kMaxHeaderBytes),
                                 "request_header_fields_too_large"));
    res.set_header("Connection", "close");
    return HR::Handled;
  }
  const Route* route = nullptr;
  bool path_known = false;
  for (const Route& r : kRoutes)
    if (req.path == r.path) {
      path_known = true;
      if (req.method == r.method || (req.method == "HEAD" && std::string_view(r.method) == "GET"))
        route = &r;
    }
  if (!path_known) {
    send_error(
        res, status_error(404, "not_found_error",
                          fmt::format("no route {} {}", loggable(req.method), loggable(req.path))));
    return HR::Handled;
  }
  if (!route) {
    for (const Route& r : kRoutes)
      if (req.path == r.path) res.set_header("Allow", r.method);
    send_error(res, status_error(405, "invalid_request_error",
                                 fmt::format("method {} is not allowed on {}", loggable(req.method),
                                             req.path),
                                 "method_not_allowed"));
    return HR::Handled;
  }
  if (req.has_header("Transfer-Encoding") && req.has_header("Content-Length")) {
    send_error(res, bad_request("",
                                "a request must not carry both Transfer-Encoding and "
                                "Content-Length"));
    return HR::Handled;
  }
  if (auto e = check_body_framing(req)) {  // a body the library could not cap: refused unread
    send_error(res, *e);
    res.set_header("Connection", "close");
    return HR::Handled;
  }
  const std::string enc = req.get_header_value("Content-Encoding");
  if (!enc.empty() && enc != "identity") {
    send_error(res, status_error(415, "invalid_request_error",
                                 fmt::format("Content-Encoding {} is not accepted; send the body "
                                             "uncompressed",
                                             loggable(enc)),
                                 "unsupported_media_type"));
    return HR::Handled;
  }
  if (!route->is_public && !st.options.api_key.empty()) {
    const std::string auth = req.get_header_value("Authorization");
    constexpr std::string_view kBearer = "Bearer ";
    const bool ok =
        auth.size() > kBearer.size() && auth.compare(0, kBearer.size(), kBearer) == 0 &&
        constant_time_equal(std::string_view(auth).substr(kBearer.size()), st.options.api_key);
    if (!ok) {
      send_error(res, status_error(401, "authentication_error",
                                   auth.empty() ? "missing API key: send Authorization: Bearer KEY"
                                                : "incorrect API key provided",
                                   "invalid_api_key"));
      return HR::Handled;
    }
  }
  if (route->needs_model && (st.draining.load() || !st.ready.load())) {
    res.set_header("Retry-After", "1");
    send_error(res, status_error(503, "service_unavailable",
                                 st.draining.load() ? "the server is shutting down"
                                                    : "the model is still loading"));
    return HR::Handled;
  }
  return HR::Unhandled;
}

// Fills the envelope of errors the library answers itself (413, 400 for a malformed request).
httplib::Server::HandlerResponse fill_error(const httplib::Request&, httplib::Response& res,
                                            size_t max_body) {
  if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
  ApiError e = status_error(res.status, "invalid_request_error", "malformed HTTP request");
  if (res.status == 413)
    e.message = fmt::format("the request body is larger than {} bytes", max_body);
  else if (res.status == 404)
    e = status_error(404, "not_found_error", "not found");
  else if (res.status >= 500)
    e = status_error(res.status, "internal_error", "internal error");
  send_error(res, e);
  return httplib::Server::HandlerResponse::Handled;
}

}  // namespace

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(dump_json(body), "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) {
  send_json(res, e.status, error_json(e));
}

std::shared_ptr<void> HttpServer::State::track(const std::shared_ptr<CompletionJob>& job) {
  uint64_t id;
  {
    std::lock_guard lock(jobs_mu);
    id = next_job++;
    jobs.emplace(id, job);
  }
  in_flight.fetch_add(1);
  return std::shared_ptr<void>(nullptr, [this, id](void*) {
    {
      std::lock_guard lock(jobs_mu);
      jobs.erase(id);
    }
    in_flight.fetch_sub(1);
  });
}

void HttpServer::State::cancel_all_jobs() {
  std::vector<std::shared_ptr<CompletionJob>> live;
  {
    std::lock_guard lock(jobs_mu);
    for (auto& [id, w] : jobs)
      if (auto j = w.lock()) live.push_back(std::move(j));
  }
  for (auto& j : live) j->cancel_all();
}

HttpServer::HttpServer(ServerOptions options)
    : state_(std::make_shared<State>(std::move(options))) {
  State& st = *state_;
  const ServerOptions& o = st.options;
  st.http.set_payload_max_length(o.max_body_bytes);
  st.http.set_read_timeout(o.read_timeout_s, 0);
  // Streams can stay silent through a long prefill: writes wait as long as reads may.
  st.http.set_write_timeout(600, 0);
  st.http.set_keep_alive_timeout(5);
  // Streamed chunks are small writes: without TCP_NODELAY each waits ~40 ms on the client's ACK.
  st.http.set_tcp_nodelay(true);
  const int threads = o.http_threads > 0 ? o.http_threads : o.max_queue + 160;
  st.http.new_task_queue = [threads] { return new WorkerPool(size_t(threads)); };
  st.http.set_pre_routing_handler(
      [&st](const httplib::Request& q, httplib::Response& r) { return check_request(st, q, r); });
  const size_t max_body = o.max_body_bytes;
  st.http.set_error_handler(httplib::Server::HandlerWithResponse(
      [max_body](const httplib::Request& q, httplib::Response& r) {
        return fill_error(q, r, max_body);
      }));
  st.http.set_exception_handler(
      [](const httplib::Request&, httplib::Response& r, std::exception_ptr ep) {
        std::string what = "internal error";
        try {
          if (ep) std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        send_error(r, status_error(500, "internal_error", what));
      });
  st.http.set_logger([&st](const httplib::Request& q, const httplib::Response& r) {
    if (st.deadlines) st.deadlines->response_sent(q.remote_addr, q.remote_port);
    {
      std::lock_guard lock(st.counts_mu);
      ++st.responses_by_status[r.status];
    }
    if (st.options.log_requests || r.status >= 500)
      std::fprintf(stderr, "%s %s -> %d\n", loggable(q.method).c_str(), loggable(q.path).c_str(),
                   r.status);
  });
  add_completion_routes(state_);
  add_info_routes(state_);
}

HttpServer::~HttpServer() {
  shutdown(std::chrono::milliseconds(0));
}

Result<int> HttpServer::bind() {
  State& st = *state_;
  const int port =
      st.options.port == 0
          ? st.http.bind_to_any_port(st.options.host)
          : (st.http.bind_to_port(st.options.host, st.options.port) ? st.options.port : -1);
  if (port < 0)
    return io_error(fmt::format("cannot listen on {}:{} (address in use or invalid)",
                                st.options.host, st.options.port));
  st.port = port;
  ConnectionDeadlines::Options d;
  d.port = port;
  d.header_timeout = std::chrono::seconds(st.options.read_timeout_s);
  d.body_timeout = 3 * d.header_timeout;
  st.deadlines = std::make_unique<ConnectionDeadlines>(d);
  return port;
}

void HttpServer::start() {
  State& st = *state_;
  st.listener = std::thread([&st] {
    st.http.listen_after_bind();
    st.listener_done.store(true);
  });
  // stop() is a no-op until the accept loop runs: wait for it so that a shutdown right after
  // start (a model that fails to load at once) cannot leave the loop running forever.
  while (!st.http.is_running() && !st.listener_done.load())
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

void HttpServer::set_backend(ServingBackend backend) {
  state_->backend = std::move(backend);
  state_->ready.store(true);
}

void HttpServer::shutdown(std::chrono::milliseconds drain) {
  State& st = *state_;
  if (!st.listener.joinable()) return;
  // New requests get 503 from here on. The listener stays open until the streams are written:
  // the library aborts every chunked response in progress once stop() closes it.
  st.draining.store(true);
  auto wait_idle = [&st](std::chrono::steady_clock::time_point deadline) {
    while (st.in_flight.load() > 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  };
  wait_idle(std::chrono::steady_clock::now() + drain);
  st.cancel_all_jobs();  // what is left ends with an error event (streams) or a 503
  wait_idle(std::chrono::steady_clock::now() + std::chrono::seconds(5));
  st.http.stop();
  st.listener.join();
  st.deadlines.reset();
}

int64_t HttpServer::in_flight() const {
  return state_->in_flight.load();
}

}  // namespace mla::server
