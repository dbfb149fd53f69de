// The HTTP-free parts of `mla bench serve`: percentiles against hand-computed numpy values, the
// SSE parser on framed input cut at every possible receive boundary, chunk reading, the
// per-request timeline and vLLM's aggregate metrics, and the arrival schedule.
#include "bench/serve_stats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace {

using namespace mla::bench;

TEST(ServePercentile, MatchesNumpyLinear) {
  // np.percentile([1,2,3,4], [50, 99, 0, 100]) = 2.5, 3.97, 1, 4
  EXPECT_DOUBLE_EQ(percentile({4, 2, 1, 3}, 50), 2.5);
  EXPECT_NEAR(percentile({4, 2, 1, 3}, 99), 3.97, 1e-12);
  EXPECT_DOUBLE_EQ(percentile({4, 2, 1, 3}, 0), 1);
  EXPECT_DOUBLE_EQ(percentile({4, 2, 1, 3}, 100), 4);
  // [1, 3, 5]: rank 0.99 · 2 = 1.98 → 3 + 0.98 · 2
  EXPECT_NEAR(percentile({5, 1, 3}, 99), 4.96, 1e-12);
  EXPECT_DOUBLE_EQ(percentile({5, 1, 3}, 50), 3);
  EXPECT_DOUBLE_EQ(percentile({7}, 99), 7);
  EXPECT_DOUBLE_EQ(percentile({}, 50), 0);
}

TEST(ServePercentile, DistributionInMilliseconds) {
  const Distribution d = distribution_ms({0.004, 0.001, 0.003, 0.002});
  EXPECT_NEAR(d.mean, 2.5, 1e-12);
  EXPECT_NEAR(d.median, 2.5, 1e-12);
  EXPECT_NEAR(d.p99, 3.97, 1e-12);
  EXPECT_NEAR(d.std, std::sqrt(1.25), 1e-12);  // population std of 1, 2, 3, 4
  const Distribution e = distribution_ms({});
  EXPECT_EQ(e.mean, 0);
  EXPECT_EQ(e.p99, 0);
}

std::vector<std::string> parse_split(const std::string& s, size_t cut1, size_t cut2) {
  std::vector<std::string> out;
  SseParser p;
  const auto on = [&](std::string_view d) { out.emplace_back(d); };
  p.feed(std::string_view(s).substr(0, cut1), on);
  p.feed(std::string_view(s).substr(cut1, cut2 - cut1), on);
  p.feed(std::string_view(s).substr(cut2), on);
  p.finish(on);
  return out;
}

TEST(ServeSse, SameEventsAtEveryReceiveBoundary) {
  // CRLF and LF endings, a comment, an event: field, data without the space, two data lines in
  // one event, and a last event whose blank line never comes.
  const std::string s =
      ": ping\r\n\r\n"
      "data: {\"a\":1}\r\n\r\n"
      "event: x\ndata:{\"b\":2}\n\n"
      "data: line1\ndata: line2\n\n"
      "data: [DONE]";
  const std::vector<std::string> want = {"{\"a\":1}", "{\"b\":2}", "line1\nline2", "[DONE]"};
  for (size_t i = 0; i <= s.size(); ++i)
    for (size_t j = i; j <= s.size(); ++j) ASSERT_EQ(parse_split(s, i, j), want) << i << " " << j;
}

TEST(ServeSse, ByteAtATimeAndLoneCr) {
  const std::string s = "data: x\r\rdata: y\r\n\r\n";
  std::vector<std::string> out;
  SseParser p;
  for (char c : s)
    p.feed(std::string_view(&c, 1), [&](std::string_view d) { out.emplace_back(d); });
  EXPECT_EQ(out, (std::vector<std::string>{"x", "y"}));
}

TEST(ServeChunk, Kinds) {
  EXPECT_EQ(parse_completion_chunk("[DONE]").kind, CompletionChunk::Kind::kDone);
  const auto t = parse_completion_chunk(
      R"({"id":"c","object":"text_completion","choices":[{"index":0,"text":"hi","finish_reason":null}],"usage":null})");
  EXPECT_EQ(t.kind, CompletionChunk::Kind::kText);
  EXPECT_EQ(t.text, "hi");
  EXPECT_EQ(t.completion_tokens, -1);
  const auto u = parse_completion_chunk(
      R"({"choices":[],"usage":{"prompt_tokens":8,"completion_tokens":5,"total_tokens":13}})");
  EXPECT_EQ(u.kind, CompletionChunk::Kind::kOther);
  EXPECT_EQ(u.completion_tokens, 5);
  EXPECT_EQ(u.prompt_tokens, 8);
  const auto e = parse_completion_chunk(R"({"error":{"message":"boom","type":"x","code":500}})");
  EXPECT_EQ(e.kind, CompletionChunk::Kind::kError);
  EXPECT_EQ(e.error, "boom");
  EXPECT_EQ(parse_completion_chunk(R"({"error":"flat"})").error, "flat");
  EXPECT_EQ(parse_completion_chunk("{not json").kind, CompletionChunk::Kind::kError);
}

RequestResult record(const std::vector<std::pair<std::string, double>>& events,
                     const std::string& transport = "") {
  StreamRecorder r;
  for (const auto& [data, t] : events) r.on_chunk(parse_completion_chunk(data), t);
  return r.finish(transport);
}

std::string text_chunk(const std::string& s) {
  return R"({"choices":[{"index":0,"text":")" + s + R"(","finish_reason":null}]})";
}

TEST(ServeRecorder, TimelineAndMetrics) {
  const std::string usage4 = R"({"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":4}})";
  const std::string finish = R"({"choices":[{"index":0,"text":"","finish_reason":"length"}]})";
  // As in vLLM's client, a chunk with empty text (a token whose bytes complete later) is a
  // token's arrival; the final chunk that only carries finish_reason is not.
  const RequestResult ok = record({{text_chunk(""), 0.05},
                                   {text_chunk("a"), 0.1},
                                   {text_chunk("b"), 0.15},
                                   {text_chunk("c"), 0.3},
                                   {finish, 0.31},
                                   {usage4, 0.31},
                                   {"[DONE]", 0.31}});
  ASSERT_TRUE(ok.success) << ok.error;
  EXPECT_DOUBLE_EQ(ok.ttft, 0.05);
  EXPECT_DOUBLE_EQ(ok.latency, 0.3);
  ASSERT_EQ(ok.itl.size(), 3u);
  EXPECT_NEAR(ok.itl[0], 0.05, 1e-12);
  EXPECT_NEAR(ok.itl[1], 0.05, 1e-12);
  EXPECT_NEAR(ok.itl[2], 0.15, 1e-12);
  EXPECT_EQ(ok.output_tokens, 4);
  EXPECT_EQ(ok.text, "abc");

  const RequestResult err = record(
      {{text_chunk("a"), 0.1}, {R"({"error":{"message":"engine died"}})", 0.2}, {"[DONE]", 0.2}});
  EXPECT_FALSE(err.success);
  EXPECT_EQ(err.error, "engine died");
  EXPECT_FALSE(record({{"[DONE]", 0.1}}).success);  // nothing to time
  EXPECT_EQ(record({{text_chunk("a"), 0.1}}, "transport: Read").error, "transport: Read");

  // No usage chunk: one token per text chunk.
  const RequestResult no_usage = record({{text_chunk("a"), 0.2}, {text_chunk("b"), 0.4}});
  EXPECT_TRUE(no_usage.success);
  EXPECT_FALSE(no_usage.usage_seen);
  EXPECT_EQ(no_usage.output_tokens, 2);

  const ServeMetrics m = compute_metrics({ok, err, no_usage}, 10, 2.0);
  EXPECT_EQ(m.completed, 2);
  EXPECT_EQ(m.failed, 1);
  EXPECT_EQ(m.first_error, "engine died");
  EXPECT_FALSE(m.all_usage);
  EXPECT_EQ(m.total_input, 20);
  EXPECT_EQ(m.total_output, 6);
  EXPECT_DOUBLE_EQ(m.request_throughput, 1.0);
  EXPECT_DOUBLE_EQ(m.output_throughput, 3.0);
  EXPECT_DOUBLE_EQ(m.total_token_throughput, 13.0);
  EXPECT_NEAR(m.ttft.mean, 125, 1e-9);  // 50 and 200 ms
  // TPOT: (0.3 − 0.05) / 3 = 83.3 ms and (0.4 − 0.2) / 1 = 200 ms; p99 interpolates linearly.
  EXPECT_NEAR(m.tpot.mean, (250.0 / 3 + 200) / 2, 1e-9);
  EXPECT_NEAR(m.tpot.p99, 250.0 / 3 + 0.99 * (200 - 250.0 / 3), 1e-9);
  // ITL pools 50, 50, 150 (first request) and 200 ms (third): median 100.
  EXPECT_NEAR(m.itl.median, 100, 1e-9);
  EXPECT_NEAR(m.e2el.mean, 350, 1e-9);  // 300 and 400 ms
}

TEST(ServeArrivals, PoissonRescaledAndSeeded) {
  const std::vector<double> a = arrival_offsets(2000, 4.0, 7);
  ASSERT_EQ(a.size(), 2000u);
  EXPECT_NEAR(a.back(), 500.0, 1e-9);  // n / rate exactly
  EXPECT_GT(a.front(), 0.0);
  double sum = 0, sq = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double gap = a[i] - (i ? a[i - 1] : 0.0);
    ASSERT_GE(gap, 0.0);
    sum += gap;
    sq += gap * gap;
  }
  // Exponential gaps have a coefficient of variation of 1 (constant gaps would give 0).
  const double mean = sum / 2000, cv = std::sqrt(sq / 2000 - mean * mean) / mean;
  EXPECT_NEAR(cv, 1.0, 0.1);
  EXPECT_EQ(arrival_offsets(2000, 4.0, 7), a);
  EXPECT_NE(arrival_offsets(2000, 4.0, 8), a);
  for (double t : arrival_offsets(5, INFINITY, 1)) EXPECT_EQ(t, 0.0);
  EXPECT_TRUE(arrival_offsets(0, 1.0, 1).empty());
}

}  // namespace

namespace mla::bench {
namespace {

RequestResult timed(double start, double ttft, std::vector<double> itl, int64_t tokens) {
  RequestResult r;
  r.success = true;
  r.start = start;
  r.ttft = ttft;
  r.itl = std::move(itl);
  r.latency = ttft;
  for (double g : r.itl) r.latency += g;
  r.output_tokens = tokens;
  return r;
}

// Peaks over 1-second buckets from the first start, as vLLM counts them: A (0 s) has tokens at
// 0.5, 0.7, 1.2 s; B (0.9 s) at 1.1, 1.3, 1.4, 2.5 s; C failed (not counted). Bucket 1 holds 4
// tokens; A and B are both in flight during buckets 0 and 1.
TEST(ServeMetricsPeaks, TokensAndRequestsPerSecond) {
  std::vector<RequestResult> rs = {timed(0.0, 0.5, {0.2, 0.5}, 3),
                                   timed(0.9, 0.2, {0.2, 0.1, 1.1}, 4)};
  RequestResult failed;
  failed.start = 0.1;
  failed.error = "x";
  rs.push_back(failed);
  const ServeMetrics m = compute_metrics(rs, 8, 3.0, {50, 90});
  EXPECT_EQ(m.max_output_tokens_per_s, 4.0);
  EXPECT_EQ(m.max_concurrent_requests, 2.0);
  ASSERT_EQ(m.ttft.at.size(), 2u);
  EXPECT_NEAR(m.ttft.at[0], 350.0, 1e-9);  // median of 0.5 and 0.2 s
  EXPECT_NEAR(m.ttft.at[1], 470.0, 1e-9);  // 0.2 + 0.9 · 0.3 s
  EXPECT_EQ(m.request_goodput, 0.0);       // no SLO: not computed
}

// Goodput counts the requests within every SLO set: TTFT ≤ 300 ms keeps B only; TPOT ≤ 400 ms
// ((1.2 − 0.5) / 2 = 350 ms for A, (1.6 − 0.2) / 3 ≈ 467 ms for B) keeps A only.
TEST(ServeMetricsPeaks, GoodputAgainstEachSlo) {
  const std::vector<RequestResult> rs = {timed(0.0, 0.5, {0.2, 0.5}, 3),
                                         timed(0.9, 0.2, {0.2, 0.1, 1.1}, 4)};
  EXPECT_EQ(compute_metrics(rs, 8, 2.0, {99}, {.ttft_ms = 300}).request_goodput, 0.5);
  EXPECT_EQ(compute_metrics(rs, 8, 2.0, {99}, {.tpot_ms = 400}).request_goodput, 0.5);
  EXPECT_EQ(compute_metrics(rs, 8, 2.0, {99}, {.ttft_ms = 300, .tpot_ms = 400}).request_goodput,
            0.0);
  EXPECT_EQ(compute_metrics(rs, 8, 2.0, {99}, {.e2el_ms = 5000}).request_goodput, 1.0);
}

}  // namespace
}  // namespace mla::bench
