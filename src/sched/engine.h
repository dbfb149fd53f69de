// Engine: the serving engine over one Model and one paged latent KV cache. A thread of its own
// runs the step loop (scheduler.h decides each step; one Model::forward runs it: every decode
// token in one batched absorbed-decode call per layer, each prefill chunk on the absorbed or
// decompressed path by the model's threshold); frontends submit requests from any thread and
// read token events from a RequestStream. Not the HTTP layer (src/server), not the model.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "cache/block_pool.h"
#include "cache/cache_capacity.h"
#include "cache/prefix_cache.h"
#include "core/thread_pool.h"
#include "mla/status.h"
#include "model/model_runtime.h"
#include "sched/metrics.h"
#include "sched/request.h"
#include "sched/request_stream.h"
#include "sched/scheduler.h"
#include "tokenizer/tokenizer.h"

namespace mla::sched {

// What the engine thread reports after each step (EngineOptions::on_step).
struct StepInfo {
  const StepPlan* plan = nullptr;   // chunks that ran, sequences preempted (refused: cleared)
  ForwardStats forward;             // paths the chunks took
  const BlockPool* pool = nullptr;  // the pool after the step (check_consistency, stats)
  size_t running = 0, waiting = 0;
  size_t refused = 0;  // requests ended with kError: they cannot fit beside the pinned prefixes
};

struct EngineOptions {
  SchedulerOptions scheduler;
  int page_size = kDefaultPageSize;  // tokens per KV page (power of two <= 256)
  int32_t num_blocks = 0;            // KV pages; 0: as many as kv_cache_bytes buys
  uint64_t kv_cache_bytes = uint64_t(1) << 30;
  PrefixCacheOptions prefix_cache;
  // Called on the engine thread after every step that ran (tests, tracing); must not block.
  std::function<void(const StepInfo&)> on_step;
  // Called before each forward pass (fault tests): an error fails the step's chunks exactly as
  // an error of the forward pass would.
  std::function<Status(const StepPlan&)> before_forward;
};

using PrefixId = uint64_t;

class Engine {
 public:
  // Allocates the cache (model.cache_shape) and starts the engine thread. model, tokenizer and
  // pool must outlive the engine; the engine thread is then the only caller of model.forward and
  // of pool (default: default_thread_pool()). With a tokenizer, events carry text and requests
  // may have stop strings. Errors: invalid_argument for options, those of the cache allocation.
  static Result<std::unique_ptr<Engine>> create(Model& model, const EngineOptions& options,
                                                const tok::Tokenizer* tokenizer = nullptr,
                                                ThreadPool* pool = nullptr);
  // Stops the thread after the current step; every unfinished request gets a final kCancelled
  // event with error "the engine stopped"; pinned prefixes are released.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request (any thread). Refused at once with invalid_argument: an invalid request
  // (validate), stop strings without a tokenizer, prompt + max_tokens over the model's context or
  // over the whole KV pool; resource_exhausted while the engine is stopping. A request that fits
  // the pool but not beside the pinned prefixes ends with a kError event. callback: see
  // EventCallback; without one, pull from the stream.
  Result<std::shared_ptr<RequestStream>> submit(Request request, EventCallback callback = {});
  // n samples of one prompt (OpenAI's n), streams in sample order (callbacks[i] for sample i; a
  // missing or empty one: pull). The prompt is computed once; then the other n - 1 sequences
  // fork its cache pages (copy-on-write: the partial last page is copied on the first write) and
  // sample on their own, sample i with seed request.sampling.seed + i, each a request of its own
  // (its id, cancel, usage with the whole prompt as cached_tokens). Until the prompt is computed
  // sample 0 carries the others: cancelling it then ends them all (cancelling another ends that
  // one alone). Admission keeps a running slot for every sample. Errors as submit, and
  // invalid_argument for n outside [1, kMaxSamplesPerPrompt] or above max_num_seqs, or more
  // callbacks than n.
  Result<std::vector<std::shared_ptr<RequestStream>>> submit_n(
      Request request, int n, std::vector<EventCallback> callbacks = {});
  // Same as the stream's cancel(); unknown or finished ids are ignored.
  void cancel(RequestId id);

  // Prefills `tokens` through the step loop and keeps their full pages referenced until
  // unpin_prefix, so requests starting with them always hit the prefix cache. Blocks until done;
  // never call it from an event callback. invalid_argument: ids outside the vocabulary, shorter
  // than one page, longer than the context or the pool; resource_exhausted: it does not fit
  // beside the other pinned prefixes or the engine is stopping.
  Result<PrefixId> pin_prefix(std::vector<int32_t> tokens);
  // Releases a pinned prefix (its pages stay cached, evictable). not_found for an unknown id.
  Status unpin_prefix(PrefixId id);

  // Blocks until every submitted request and pin job has finished.
  void wait_idle() const;

  EngineMetrics metrics() const;       // a consistent snapshot, any thread
  BlockPoolStats cache_stats() const;  // the pool as of the end of the last loop iteration
  int32_t num_blocks() const;
  int page_size() const;
  const SchedulerOptions& scheduler_options() const;  // as clamped (max_num_seqs <= budget)

  struct Impl;

 private:
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mla::sched
