// Histogram buckets (le semantics, +Inf), counter merging and the Prometheus text: names under
// mla:, TYPE lines, cumulative buckets, escaped labels.
#include "sched/metrics.h"

#include <gtest/gtest.h>

namespace mla::sched {
namespace {

bool has(const std::string& text, const std::string& line) {
  return text.find(line) != std::string::npos;
}

TEST(Metrics, HistogramBucketsAreUpperBoundsInclusive) {
  Histogram h({1.0, 2.0});
  h.observe(0.5);
  h.observe(1.0);
  h.observe(1.5);
  h.observe(7.0);
  EXPECT_EQ(h.counts(), (std::vector<uint64_t>{2, 1, 1}));
  EXPECT_EQ(h.count(), 4u);
  EXPECT_DOUBLE_EQ(h.sum(), 10.0);
  Histogram g({1.0, 2.0});
  g.observe(3.0);
  h.merge(g);
  EXPECT_EQ(h.counts(), (std::vector<uint64_t>{2, 1, 2}));
}

TEST(Metrics, AccumulateAddsCountersAndHistogramsNotGauges) {
  EngineMetrics total, step;
  total.num_requests_running = 3;
  step.num_requests_running = 9;
  step.generation_tokens = 5;
  step.count_finish(FinishReason::kLength);
  step.count_finish(FinishReason::kCancelled);
  step.iteration_tokens.observe(5);
  total.accumulate(step);
  total.accumulate(step);
  EXPECT_EQ(total.num_requests_running, 3);
  EXPECT_EQ(total.generation_tokens, 10);
  EXPECT_EQ(total.request_success[1], 2);
  EXPECT_EQ(total.request_success[2], 2);
  EXPECT_EQ(total.iteration_tokens.count(), 2u);
}

TEST(Metrics, PrometheusText) {
  EngineMetrics m;
  m.num_requests_running = 2;
  m.kv_cache_usage_perc = 0.25;
  m.num_preemptions = 4;
  m.absorbed_chunks = 6;
  m.decompressed_chunks = 1;
  m.count_finish(FinishReason::kStop);
  m.time_to_first_token.observe(0.003);
  m.time_to_first_token.observe(100.0);
  const std::string t = render_prometheus(m, "tiny \"v3\"");
  const std::string l = "model_name=\"tiny \\\"v3\\\"\"";
  EXPECT_TRUE(has(t, "# TYPE vllm:num_requests_running gauge\n"));
  EXPECT_TRUE(has(t, "vllm:num_requests_running{" + l + "} 2\n"));
  EXPECT_TRUE(has(t, "vllm:kv_cache_usage_perc{" + l + "} 0.25\n"));
  EXPECT_TRUE(has(t, "# TYPE vllm:num_preemptions_total counter\n"));
  EXPECT_TRUE(has(t, "vllm:num_preemptions_total{" + l + "} 4\n"));
  EXPECT_TRUE(has(t, "vllm:request_success_total{" + l + ",finished_reason=\"stop\"} 1\n"));
  EXPECT_TRUE(has(t, "vllm:request_success_total{" + l + ",finished_reason=\"abort\"} 0\n"));
  EXPECT_TRUE(has(t, "vllm:mla_prefill_chunks_total{" + l + ",path=\"absorbed\"} 6\n"));
  EXPECT_TRUE(has(t, "vllm:mla_prefill_chunks_total{" + l + ",path=\"decompressed\"} 1\n"));
  EXPECT_TRUE(has(t, "# TYPE vllm:time_to_first_token_seconds histogram\n"));
  EXPECT_TRUE(has(t, "vllm:time_to_first_token_seconds_bucket{" + l + ",le=\"0.0025\"} 0\n"));
  EXPECT_TRUE(has(t, "vllm:time_to_first_token_seconds_bucket{" + l + ",le=\"0.005\"} 1\n"));
  EXPECT_TRUE(has(t, "vllm:time_to_first_token_seconds_bucket{" + l + ",le=\"80\"} 1\n"));
  EXPECT_TRUE(has(t, "vllm:time_to_first_token_seconds_bucket{" + l + ",le=\"+Inf\"} 2\n"));
  EXPECT_TRUE(has(t, "vllm:time_to_first_token_seconds_count{" + l + "} 2\n"));
  for (const char* name :
       {"num_requests_waiting", "kv_cache_fragmentation", "prompt_tokens_total",
        "generation_tokens_total", "prefix_cache_queries_total", "prefix_cache_hits_total",
        "inter_token_latency_seconds", "e2e_request_latency_seconds", "request_queue_time_seconds",
        "iteration_tokens_total", "decode_tokens_total", "request_prompt_tokens",
        "request_generation_tokens", "request_prefill_time_seconds", "request_decode_time_seconds",
        "request_inference_time_seconds"})
    EXPECT_TRUE(has(t, std::string("# TYPE vllm:") + name + " ")) << name;
  // No labels at all without a model name; another prefix on every name.
  EXPECT_TRUE(has(render_prometheus(m), "\nvllm:num_requests_running 2\n"));
  const std::string mine = render_prometheus(m, "", "mla:");
  EXPECT_TRUE(has(mine, "# TYPE mla:num_requests_running gauge\nmla:num_requests_running 2\n"));
  EXPECT_FALSE(has(mine, "vllm:"));
}

// vLLM's 1-2-5 token buckets, up to the first bound at or past the limit.
TEST(Metrics, RequestTokenBuckets) {
  EXPECT_EQ(request_token_buckets(100), (std::vector<double>{1, 2, 5, 10, 20, 50, 100}));
  EXPECT_EQ(request_token_buckets(30), (std::vector<double>{1, 2, 5, 10, 20, 50}));
}

}  // namespace
}  // namespace mla::sched
