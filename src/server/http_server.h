// `mla serve`'s HTTP server: the OpenAI-compatible API (chat completions, completions, models),
// /health, /metrics, /tokenize, /detokenize and the chat page, over one serving engine. It listens
// before the model is loaded (/health answers 503 until set_backend), checks every request against
// its limits before the engine sees it, and cancels the work of clients that go away.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "mla/status.h"
#include "model/model_runtime.h"
#include "sched/engine.h"
#include "server/openai_request.h"
#include "tokenizer/tokenizer_config.h"

namespace mla::server {

struct ServerOptions {
  std::string host = "127.0.0.1";           // loopback unless asked otherwise
  int port = 8080;                          // 0: any free port (bind() returns it)
  std::string api_key;                      // empty: no authentication
  size_t max_body_bytes = size_t(4) << 20;  // larger bodies: 413 before they are read
  int max_queue = 64;         // requests admitted beyond the engine's running slots before 429
  int http_threads = 0;       // connection threads; 0: max_queue + 160
  int read_timeout_s = 10;    // a request's headers must arrive within this, and then its body
  bool log_requests = false;  // one line per request on stderr (else only errors)
  // /metrics asks for the API key too; by default it is open, as Prometheus scrapers expect.
  bool metrics_require_key = false;
  // The prefix of every /metrics name: vLLM's, so its dashboards work unchanged
  // (sched::kDefaultMetricsPrefix).
  std::string metrics_prefix = "vllm:";
  // CORS: the browser origins ("https://host:port", or "*" for any) whose pages may call the API;
  // their requests get Access-Control-Allow-Origin and preflights (OPTIONS) are answered. Empty:
  // none (a page served elsewhere cannot read the answers).
  std::vector<std::string> allowed_origins;
};

// What serves requests once the model is loaded. Pointers must outlive the server.
struct ServingBackend {
  sched::Engine* engine = nullptr;
  ServedModel model;  // name, tokenizer, chat format, limits
};

class HttpServer {
 public:
  explicit HttpServer(ServerOptions options);
  ~HttpServer();  // shutdown(0) if still running
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds host:port; returns the port. unavailable when the address is taken or invalid.
  Result<int> bind();
  // Accepts connections on a thread of its own (after bind()).
  void start();
  // From now on completions are served; until then /health and the API answer 503.
  void set_backend(ServingBackend backend);
  // SIGTERM's path: stops accepting (new requests get 503 or a refused connection), lets
  // in-flight requests run for up to `drain`, then cancels the rest (their streams end with an
  // error event and [DONE]); returns once every handler has returned.
  void shutdown(std::chrono::milliseconds drain);
  // Completion requests admitted and not yet answered.
  int64_t in_flight() const;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace mla::server
