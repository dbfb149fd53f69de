// HttpServer: the cpp-httplib server, its limits and handlers (the checks before routing are in
// request_checks.cc), and the lifecycle: bind, start, set_backend, drain and shut down.
#include "server/http_server.h"

#include <fmt/format.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdio>

#include "server/connection_watch.h"
#include "server/request_checks.h"
#include "server/server_state.h"
#include "server/worker_pool.h"

namespace mla::server {
namespace {

// Fills the envelope of errors the library answers itself (413, 400 for a malformed request).
httplib::Server::HandlerResponse fill_error(const httplib::Request& req, httplib::Response& res,
                                            size_t max_body) {
  if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
  // A framing error leaves the connection's position in the byte stream unknown: it ends with
  // this answer (http_connection.h).
  if (res.status == 400 || res.status == 413 || res.status == 414)
    res.set_header("Connection", "close");
  // HEAD never gets a body; nor does a 400 for a request line that could not be parsed (its
  // method is unknown: a HEAD client would take the body for the next response).
  if (req.method == "HEAD" || (req.method.empty() && res.status == 400))
    return httplib::Server::HandlerResponse::Handled;
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

std::shared_ptr<void> HttpServer::State::admit(const std::shared_ptr<CompletionJob>& job,
                                               int64_t seqs, int64_t limit) {
  int64_t held = admitted_seqs.load();
  do {
    if (held + seqs > limit) return nullptr;
  } while (!admitted_seqs.compare_exchange_weak(held, held + seqs));
  uint64_t id;
  {
    std::lock_guard lock(jobs_mu);
    id = next_job++;
    jobs.emplace(id, job);
  }
  in_flight.fetch_add(1);
  // A non-null pointer with a no-op target: the deleter runs when the last copy goes.
  return std::shared_ptr<void>(this, [this, id, seqs](void*) {
    {
      std::lock_guard lock(jobs_mu);
      jobs.erase(id);
    }
    in_flight.fetch_sub(1);
    admitted_seqs.fetch_sub(seqs);
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
  // The library's default closes a connection after 5 requests; pipelining clients send more.
  st.http.set_keep_alive_max_count(100);
  st.http.on_refused_head = [&st](int status, const std::string& message, httplib::Response& r) {
    send_error(r, status_error(status, "invalid_request_error", message,
                               status == 414 ? "uri_too_long" : "request_header_fields_too_large"));
    std::lock_guard lock(st.counts_mu);
    ++st.responses_by_status[status];
  };
  // Streamed chunks are small writes: without TCP_NODELAY each waits ~40 ms on the client's ACK.
  st.http.set_tcp_nodelay(true);
  const int threads = o.http_threads > 0 ? o.http_threads : o.max_queue + 160;
  // When every worker is taken, connections still waiting for their headers (slow clients,
  // idle keep-alives) give way to the new one (docs/RELIABILITY.md §Checklist L6).
  st.http.new_task_queue = [threads, &st] {
    return new WorkerPool(
        size_t(threads),
        [&st] {
          if (st.deadlines) st.deadlines->shed(std::chrono::milliseconds(500));
        },
        &st.queued_connections);
  };
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
  // The library listens with a backlog of 5: a burst of connections would wait in SYN retries
  // (seconds) instead of the accept queue. Listening again only raises the backlog.
  if (const int fd = find_listening_fd(port); fd >= 0) ::listen(fd, SOMAXCONN);
  ConnectionDeadlines::Options d;
  d.port = port;
  d.header_timeout = std::chrono::seconds(st.options.read_timeout_s);
  d.body_timeout = d.header_timeout;  // counted again from the end of the headers
  d.queued = &st.queued_connections;
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
