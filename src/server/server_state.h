// HttpServer::State: what the route handlers share (http_server.cc wires them, the files named
// *_routes.cc implement them). Completion jobs register here so shutdown can cancel them.
#pragma once

#include <httplib.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "server/api_error.h"
#include "server/connection_deadlines.h"
#include "server/http_connection.h"
#include "server/http_server.h"

namespace mla::server {

// One completion request: its engine streams (one per choice) and their events, handed from the
// engine thread (callbacks) to the connection's thread (wait_event).
class CompletionJob {
 public:
  struct Event {
    int choice = 0;
    sched::RequestEvent event;
  };
  // The engine's callback for choice `choice`; holds the job weakly (the job owns the streams).
  static sched::EventCallback callback(const std::shared_ptr<CompletionJob>& job, int choice);
  void add_stream(std::shared_ptr<sched::RequestStream> s);
  // Next event, waiting at most `timeout`; false on a timeout.
  bool wait_event(std::chrono::milliseconds timeout, Event* out);
  void cancel_all();
  ~CompletionJob();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Event> events_;
  std::vector<std::shared_ptr<sched::RequestStream>> streams_;
};

struct HttpServer::State {
  explicit State(ServerOptions o) : options(std::move(o)) {}

  const ServerOptions options;
  ConnectionServer http;
  std::thread listener;
  std::atomic<bool> listener_done{false};  // the accept loop has returned
  int port = -1;
  std::unique_ptr<ConnectionDeadlines> deadlines;  // from bind() on
  std::atomic<int64_t> queued_connections{0};      // accepted, waiting for a worker

  // Set once by set_backend (then read without a lock: ready is the release/acquire flag).
  ServingBackend backend;
  std::atomic<bool> ready{false};
  std::atomic<bool> draining{false};

  std::atomic<int64_t> in_flight{0};      // admitted completion requests
  std::atomic<int64_t> admitted_seqs{0};  // their engine sequences (one per prompt): the 429 limit
  std::mutex jobs_mu;
  std::map<uint64_t, std::weak_ptr<CompletionJob>> jobs;  // live jobs, for shutdown
  uint64_t next_job = 0;

  std::mutex counts_mu;
  std::map<int, int64_t> responses_by_status;  // for /metrics

  // Admits a job of `seqs` engine sequences when the sequences already admitted plus these stay
  // within `limit`. The check and the count are one atomic step, so two requests cannot both take
  // the last free slot. Returns null when full; else a token that, until destroyed, keeps the job
  // registered (for shutdown) and counted in in_flight and admitted_seqs.
  std::shared_ptr<void> admit(const std::shared_ptr<CompletionJob>& job, int64_t seqs,
                              int64_t limit);
  void cancel_all_jobs();
};

// Response helpers shared by the routes.
void send_json(httplib::Response& res, int status, const nlohmann::json& body);
void send_error(httplib::Response& res, const ApiError& e);

// Routes (each file registers its handlers on state.http).
void add_completion_routes(const std::shared_ptr<HttpServer::State>& state);
void add_info_routes(const std::shared_ptr<HttpServer::State>& state);

}  // namespace mla::server
