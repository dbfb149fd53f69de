// The engine's metrics (docs/SERVING.md §Engine metrics: vLLM's names, types and labels under
// vLLM's prefix `vllm:` by default, so its dashboards read them unchanged) and
// their Prometheus text exposition (format 0.0.4). Counters are never reset: readers take rates
// over their own windows, as PromQL does.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "sched/request.h"

namespace mla::sched {

// Cumulative-bucket histogram as Prometheus defines it: counts[i] observations <= bounds[i]
// (non-cumulative here, cumulated when rendered), the last count is +Inf.
class Histogram {
 public:
  Histogram() = default;
  explicit Histogram(std::vector<double> bounds);  // strictly increasing upper bounds

  void observe(double v);
  void merge(const Histogram& other);  // same bounds

  const std::vector<double>& bounds() const { return bounds_; }
  const std::vector<uint64_t>& counts() const { return counts_; }  // [bounds + 1]
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  uint64_t count_ = 0;
  double sum_ = 0;
};

// Bucket bounds in seconds (latencies from 1 ms: a tiny model's step is sub-millisecond, a
// large one's prefill minutes) and in tokens per step (powers of two up to 16,384).
std::vector<double> latency_buckets();
std::vector<double> inter_token_buckets();
std::vector<double> step_token_buckets();
// Tokens per request, as vLLM buckets them: 1, 2, 5, 10, 20, 50, ... up to the first past `max`.
std::vector<double> request_token_buckets(int64_t max = 1 << 20);

struct EngineMetrics {
  EngineMetrics();

  // Gauges, as of the end of the last step.
  int64_t num_requests_running = 0;
  int64_t num_requests_waiting = 0;
  double kv_cache_usage_perc = 0;     // pages referenced / all pages, 0..1 (vLLM's convention)
  double kv_cache_fragmentation = 0;  // unused rows in referenced pages / their rows, 0..1
  int64_t kv_cache_blocks = 0;        // pool size, pages
  int64_t num_pinned_prefixes = 0;

  // Counters.
  int64_t num_preemptions = 0;
  int64_t prompt_tokens = 0;         // prompt tokens of requests admitted the first time
  int64_t generation_tokens = 0;     // tokens sampled
  int64_t prefix_cache_queries = 0;  // tokens looked up on admission
  int64_t prefix_cache_hits = 0;     // ... served from the cache
  int64_t steps = 0;
  int64_t absorbed_chunks = 0;      // prefill chunks (> 1 token) on the absorbed MLA path
  int64_t decompressed_chunks = 0;  // ... on the decompressed path
  int64_t decode_tokens = 0;        // 1-token chunks, batched into one decode call per layer
  // Finished requests by reason: stop, length, cancelled (vLLM's "abort"), error.
  std::array<int64_t, 4> request_success{};

  Histogram time_to_first_token;  // seconds, submit → first token sampled
  Histogram inter_token_latency;  // seconds between consecutive tokens of a request
  Histogram e2e_request_latency;  // seconds, submit → finish
  Histogram request_queue_time;   // seconds, submit → first scheduled
  Histogram iteration_tokens;     // tokens per step
  // Per finished request (vLLM's): its prompt and generated tokens; seconds from its first
  // scheduled step to its first token (prefill), from there to its finish (decode), and from its
  // first scheduled step to its finish (inference).
  Histogram request_prompt_tokens, request_generation_tokens;
  Histogram request_prefill_time, request_decode_time, request_inference_time;

  void count_finish(FinishReason r);
  // Adds the counters and histograms of `delta` (one step's); gauges are left as they are.
  void accumulate(const EngineMetrics& delta);
};

// The default metric name prefix (`mla serve --metrics-prefix`).
inline constexpr const char* kDefaultMetricsPrefix = "vllm:";

// The text a /metrics endpoint serves: HELP and TYPE lines, then samples named prefix + name;
// every sample carries model_name="<model_name>" when it is not empty (label value escaped).
std::string render_prometheus(const EngineMetrics& m, const std::string& model_name = "",
                              const std::string& prefix = kDefaultMetricsPrefix);

}  // namespace mla::sched
