// The HTTP-free parts of `mla bench serve` (tools/mla/cmd_bench_serve.cc), kept here so they can be
// unit-tested without a server: the Poisson arrival schedule, Server-Sent-Events framing, the
// reading of one `/v1/completions` stream chunk, the per-request timeline (TTFT, ITL, E2EL) and the
// aggregate metrics. Definitions follow vLLM's `vllm bench serve` so that figures are comparable
// with it (docs/SERVING.md, section `mla bench serve`); where they differ it is said below.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace mla::bench {

// Send times of n requests in seconds from the start, non-decreasing. A finite rate draws
// exponential gaps (a Poisson process; vLLM's Gamma with burstiness 1) from `seed`, the first
// request included, then rescales the sum so the last one lands exactly at n / rate (as vLLM
// does, which removes a drift of a few percent between seeds). rate = +inf: all zero.
std::vector<double> arrival_offsets(int n, double rate, uint64_t seed);

// numpy.percentile's default ("linear"): the value at fractional rank p/100 · (n − 1), linearly
// interpolated, so results match vLLM's np.percentile / np.median. Empty input gives 0 (vLLM
// reports 0 for an empty list as well). p in [0, 100].
double percentile(std::vector<double> values, double p);

// Incremental SSE parser: bytes arrive in arbitrary pieces (a TCP read can end mid-line, even
// between '\r' and '\n'), so it keeps the unfinished line. Per the SSE rules: lines end in \n,
// \r\n or \r; `data:` with an optional single space after the colon; several data lines of one
// event join with '\n'; a blank line dispatches the event; comments (':') and other fields are
// skipped.
class SseParser {
 public:
  using OnData = std::function<void(std::string_view data)>;
  // Feeds a piece of the body; on_data runs once per completed event carrying data.
  void feed(std::string_view bytes, const OnData& on_data);
  // End of body: an event whose blank line never came is still delivered (servers that close
  // right after the last `data:` line would otherwise lose it).
  void finish(const OnData& on_data);

 private:
  void line(std::string_view l, const OnData& on_data);
  std::string partial_, data_;
  bool has_data_ = false, after_cr_ = false;
};

// One parsed `/v1/completions` stream event.
struct CompletionChunk {
  enum class Kind { kDone, kText, kOther, kError };
  Kind kind = Kind::kOther;
  std::string text;  // choices[0].text or (chat) its delta's reasoning_content + content (kText)
  bool finished = false;           // choices[0].finish_reason is set (kText)
  int64_t completion_tokens = -1;  // usage.completion_tokens when the chunk carries usage
  int64_t prompt_tokens = -1;      // usage.prompt_tokens likewise
  std::string error;               // kError: the error message (or why the chunk is unreadable)
};

// Reads one event's data: "[DONE]", a JSON chunk with choices (kText), an `error` object
// (OpenAI's wrapped form or a plain string), usage-only or other JSON (kOther), or text that is
// not JSON (kError, so a broken stream counts as a failed request rather than a silent one).
CompletionChunk parse_completion_chunk(std::string_view data);

// What one request produced, in seconds from the moment it was sent.
struct RequestResult {
  double start = 0;  // when it was sent, seconds from the benchmark's start
  bool success = false;
  std::string error;
  double ttft = 0;             // first chunk with non-empty text
  double latency = 0;          // E2EL: the last chunk with non-empty text (vLLM's definition)
  std::vector<double> itl;     // gaps between successive non-empty text chunks
  int64_t output_tokens = 0;   // usage.completion_tokens, else the number of text chunks
  int64_t prompt_tokens = -1;  // usage.prompt_tokens when reported
  bool usage_seen = false;
  std::string text;
};

// Builds a RequestResult from the chunks of one stream as they arrive. Text chunks with empty
// text are not "content": a server may send one for a token whose UTF-8 is incomplete, and
// counting it would shorten TTFT (SGLang's client skips them too; vLLM's counts them).
class StreamRecorder {
 public:
  void on_chunk(const CompletionChunk& c, double t);
  // The body ended (t: its time) or the transfer failed (error non-empty).
  RequestResult finish(const std::string& transport_error);

 private:
  RequestResult r_;
  int64_t token_chunks_ = 0;
  double last_ = 0;
  bool done_ = false;
};

struct Distribution {
  double mean = 0, median = 0, std = 0, p99 = 0;  // milliseconds
  std::vector<double> at;                         // at each of the percentiles asked, ms
};
Distribution distribution_ms(const std::vector<double>& seconds,
                             const std::vector<double>& percentiles = {99});

// Service-level objectives of --goodput, in ms; < 0: not set. A request meets them when each
// set one is at least its TTFT / TPOT / E2EL (vLLM's definition of goodput).
struct Slo {
  double ttft_ms = -1, tpot_ms = -1, e2el_ms = -1;
  bool any() const { return ttft_ms >= 0 || tpot_ms >= 0 || e2el_ms >= 0; }
};

struct ServeMetrics {
  int completed = 0, failed = 0;
  int64_t total_input = 0, total_output = 0;
  double duration_s = 0, request_throughput = 0, output_throughput = 0, total_token_throughput = 0;
  double request_goodput = 0;  // requests meeting the Slo per second (when one is set)
  // vLLM's peaks over 1-second buckets from the first request's start: tokens received in a
  // bucket (the first token at start + TTFT, each next one an ITL later), and requests in
  // flight at some moment of a bucket (from its start's bucket to its end's).
  double max_output_tokens_per_s = 0, max_concurrent_requests = 0;
  Distribution ttft, tpot, itl, e2el;
  std::string first_error;
  bool all_usage = true;  // every successful request reported usage.completion_tokens
};

// vLLM's calculate_metrics: only successful requests enter the latencies and token counts;
// TPOT = (E2EL − TTFT) / (output_tokens − 1) for requests with more than one token; ITL pools
// every gap of every request. A request's input tokens are the server's usage.prompt_tokens, or
// input_len where it reported none.
ServeMetrics compute_metrics(const std::vector<RequestResult>& results, int64_t input_len,
                             double duration_s, const std::vector<double>& percentiles = {99},
                             const Slo& slo = {});

}  // namespace mla::bench
