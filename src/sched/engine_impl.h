// Engine::Impl: the state behind engine.h, shared by engine.cc (thread, inbox, frontend calls)
// and engine_step.cc (one step: plan, forward, sample, events). Two kinds of state:
//  - the inbox and the metrics snapshot, guarded by their mutexes, touched by any thread;
//  - everything else (scheduler, pool, cache, live requests), touched by the engine thread only.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "model/sampler.h"
#include "sched/engine.h"
#include "sched/stop_strings.h"
#include "tokenizer/stream_decoder.h"

namespace mla::sched {

using Clock = std::chrono::steady_clock;

// One request (or pin job) from submit to its final event.
struct LiveRequest {
  LiveRequest(RequestId id, Request r, int64_t max_total, BlockPool* pool, KvCacheStorage* storage);

  Sequence seq;
  Request req;
  std::shared_ptr<RequestStream> stream;  // null for a pin job
  Sampler sampler;
  std::optional<tok::StreamDecoder> decoder;
  StopStringFilter stops;
  Clock::time_point arrival, last_token;
  Clock::time_point first_scheduled, first_token;  // set with scheduled_once / the first token
  bool scheduled_once = false;
  bool fork = false;  // a later sample of a submit_n prompt: its prompt is the first sample's
  int64_t generated = 0;
  // Request::prompt_logprobs: collected per prefill chunk, sent with the first token; the next
  // prompt position to report (a preempted request recomputes its prompt without repeats).
  std::vector<TokenLogprobs> prompt_lps;
  int64_t prompt_lps_next = 1;
  std::optional<std::promise<Result<PrefixId>>> pin_done;  // set for a pin job
  // The other samples of this prompt (Engine::submit_n), carried until its prompt is computed:
  // then they fork its pages and run as requests of their own; they end with it if it ends
  // before (cancel, error, shutdown).
  std::vector<std::unique_ptr<LiveRequest>> forks;
};

// Cross-thread requests to the engine thread. Streams hold it weakly for cancel().
struct Inbox : CancelSink {
  void request_cancel(RequestId id) override;

  std::mutex mu;
  std::condition_variable cv;       // the engine thread waits here for work
  std::condition_variable idle_cv;  // wait_idle() waits here for outstanding == 0
  std::vector<std::unique_ptr<LiveRequest>> submitted;
  std::vector<RequestId> cancels;
  std::vector<std::pair<PrefixId, std::promise<Status>>> unpins;
  int64_t outstanding = 0;  // submitted requests and pin jobs without a final event yet
  bool stopping = false;
};

struct Engine::Impl {
  Impl(Model& model, const EngineOptions& options, const tok::Tokenizer* tokenizer,
       ThreadPool* pool, BlockPool block_pool, KvCacheStorage cache);

  // Any thread: a validated request with its stream (submit, submit_n), and its hand-over to
  // the engine thread with the number of streams it carries.
  Result<std::unique_ptr<LiveRequest>> make_request(Request request, EventCallback callback);
  Status enqueue(std::unique_ptr<LiveRequest> r, int64_t streams);

  // Engine thread.
  void loop();
  // Takes the inbox; false once stopping.
  bool take_inbox(std::vector<std::unique_ptr<LiveRequest>>* submitted,
                  std::vector<RequestId>* cancels,
                  std::vector<std::pair<PrefixId, std::promise<Status>>>* unpins);
  void step();
  void shutdown();
  // Ends a piece of engine-thread work: adds `delta` to the metrics, refreshes the gauges and the
  // pool stats, then delivers the outbox (so a frontend that saw a final event sees the metrics
  // and the pool that include it) and wakes wait_idle().
  void commit(const EngineMetrics& delta);

  // Step helpers (engine_step.cc). An event goes to `outbox`, delivered after the metrics merge.
  struct Outgoing {
    std::shared_ptr<RequestStream> stream;
    RequestEvent event;
  };
  // logits: the row token was sampled from ([vocab]), for the request's logprobs.
  // Request::prompt_logprobs of this step's prompt rows (logits of every row: first_row[i] is
  // chunk i's first).
  void collect_prompt_logprobs(const StepPlan& plan, std::span<const int64_t> first_row,
                               std::span<const float> logits);
  void on_token(LiveRequest& r, int32_t token, std::span<const float> logits, Clock::time_point now,
                EngineMetrics* m);
  // Ends r with a final event (any reason), releasing its blocks; r is destroyed. A pin job gets
  // a status of `pin_code` with the error instead (resource_exhausted: it did not fit or the
  // engine is stopping; a failed forward pass passes its own code).
  void finish(LiveRequest& r, FinishReason why, std::string error, RequestEvent event,
              Clock::time_point now, EngineMetrics* m,
              StatusCode pin_code = StatusCode::kResourceExhausted);
  Usage usage_of(const LiveRequest& r) const;

  Model& model;
  const EngineOptions options;
  const tok::Tokenizer* tokenizer;
  ThreadPool* pool;
  BlockPool block_pool;
  KvCacheStorage cache;
  Scheduler scheduler;
  // Fixed at creation, so frontend threads read them without a lock.
  const int64_t max_context;
  const int32_t num_blocks;
  const int page_size;
  const std::vector<int64_t> eos_ids;

  std::shared_ptr<Inbox> inbox = std::make_shared<Inbox>();
  std::atomic<RequestId> next_id{1};

  // Engine thread only.
  std::unordered_map<RequestId, std::unique_ptr<LiveRequest>> live;
  std::unordered_map<PrefixId, std::unique_ptr<LiveRequest>> pinned;
  std::vector<float> logits;  // [chunks, vocab]
  std::vector<Outgoing> outbox;
  int64_t finished_in_step = 0;  // final events in outbox (outstanding decrements)
  // Pin jobs' results, handed over at the end of commit().
  std::vector<std::pair<std::promise<Result<PrefixId>>, Result<PrefixId>>> pin_results;

  mutable std::mutex metrics_mu;
  EngineMetrics metrics;      // guarded by metrics_mu
  BlockPoolStats pool_stats;  // guarded by metrics_mu

  std::thread thread;  // last: starts after everything above exists
};

}  // namespace mla::sched
