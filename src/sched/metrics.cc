// Histograms and the Prometheus text rendering of EngineMetrics.
#include "sched/metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace mla::sched {

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {
  for (size_t i = 1; i < bounds_.size(); ++i)
    MLA_CHECK(bounds_[i - 1] < bounds_[i], "histogram bounds not increasing at {}", i);
}

void Histogram::observe(double v) {
  // First bucket whose upper bound holds v (le semantics); past all of them: +Inf.
  const size_t i = size_t(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  ++counts_[i];
  ++count_;
  sum_ += v;
}

void Histogram::merge(const Histogram& o) {
  MLA_CHECK(o.bounds_ == bounds_, "merge of histograms with different buckets");
  for (size_t i = 0; i < counts_.size(); ++i) counts_[i] += o.counts_[i];
  count_ += o.count_;
  sum_ += o.sum_;
}

std::vector<double> latency_buckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,  0.1,   0.25,  0.5,    1.0,   2.5,
          5.0,   10.0,   20.0,  40.0, 80.0,  160.0, 320.0, 640.0, 1280.0, 2560.0};
}

std::vector<double> inter_token_buckets() {
  return {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1,
          0.15,   0.2,   0.3,    0.5,   0.75, 1.0,   2.5,  5.0,   10.0};
}

std::vector<double> step_token_buckets() {
  std::vector<double> b;
  for (double v = 1; v <= 16384; v *= 2) b.push_back(v);
  return b;
}

std::vector<double> request_token_buckets(int64_t max) {
  std::vector<double> b;
  for (double decade = 1;; decade *= 10)
    for (double m : {1.0, 2.0, 5.0}) {
      b.push_back(m * decade);
      if (m * decade >= double(max)) return b;
    }
}

EngineMetrics::EngineMetrics()
    : time_to_first_token(latency_buckets()),
      inter_token_latency(inter_token_buckets()),
      e2e_request_latency(latency_buckets()),
      request_queue_time(latency_buckets()),
      iteration_tokens(step_token_buckets()),
      request_prompt_tokens(request_token_buckets()),
      request_generation_tokens(request_token_buckets()),
      request_prefill_time(latency_buckets()),
      request_decode_time(latency_buckets()),
      request_inference_time(latency_buckets()) {}

void EngineMetrics::count_finish(FinishReason r) {
  switch (r) {
    case FinishReason::kStop:
      ++request_success[0];
      break;
    case FinishReason::kLength:
      ++request_success[1];
      break;
    case FinishReason::kCancelled:
      ++request_success[2];
      break;
    case FinishReason::kError:
      ++request_success[3];
      break;
    case FinishReason::kNone:
      break;
  }
}

void EngineMetrics::accumulate(const EngineMetrics& d) {
  num_preemptions += d.num_preemptions;
  prompt_tokens += d.prompt_tokens;
  generation_tokens += d.generation_tokens;
  prefix_cache_queries += d.prefix_cache_queries;
  prefix_cache_hits += d.prefix_cache_hits;
  steps += d.steps;
  absorbed_chunks += d.absorbed_chunks;
  decompressed_chunks += d.decompressed_chunks;
  decode_tokens += d.decode_tokens;
  for (size_t i = 0; i < request_success.size(); ++i) request_success[i] += d.request_success[i];
  time_to_first_token.merge(d.time_to_first_token);
  inter_token_latency.merge(d.inter_token_latency);
  e2e_request_latency.merge(d.e2e_request_latency);
  request_queue_time.merge(d.request_queue_time);
  iteration_tokens.merge(d.iteration_tokens);
  request_prompt_tokens.merge(d.request_prompt_tokens);
  request_generation_tokens.merge(d.request_generation_tokens);
  request_prefill_time.merge(d.request_prefill_time);
  request_decode_time.merge(d.request_decode_time);
  request_inference_time.merge(d.request_inference_time);
}

namespace {

// Prometheus label values escape backslash, double quote and newline.
std::string escape_label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

// Shortest text that reads back as the same double; Prometheus spells infinities +Inf / -Inf.
std::string number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  return fmt::format("{}", v);
}

class Writer {
 public:
  Writer(const std::string& model, const std::string& prefix)
      : base_(model.empty() ? "" : fmt::format("model_name=\"{}\"", escape_label(model))),
        prefix_(prefix) {}

  void head(const std::string& name, const char* type, const char* help) {
    out_ += fmt::format("# HELP {0}{1} {2}\n# TYPE {0}{1} {3}\n", prefix_, name, help, type);
  }
  void sample(const std::string& name, double v, const std::string& extra = "") {
    std::string labels = base_;
    if (!extra.empty()) labels += (labels.empty() ? "" : ",") + extra;
    out_ += fmt::format("{}{}{}{}{} {}\n", prefix_, name, labels.empty() ? "" : "{", labels,
                        labels.empty() ? "" : "}", number(v));
  }
  void gauge(const std::string& name, double v, const char* help) {
    head(name, "gauge", help);
    sample(name, v);
  }
  void counter(const std::string& name, double v, const char* help) {
    head(name, "counter", help);
    sample(name, v);
  }
  void histogram(const std::string& name, const Histogram& h, const char* help) {
    head(name, "histogram", help);
    uint64_t cum = 0;
    for (size_t i = 0; i < h.counts().size(); ++i) {
      cum += h.counts()[i];
      const double le = i < h.bounds().size() ? h.bounds()[i] : INFINITY;
      sample(name + "_bucket", double(cum), fmt::format("le=\"{}\"", number(le)));
    }
    sample(name + "_sum", h.sum());
    sample(name + "_count", double(h.count()));
  }
  std::string take() { return std::move(out_); }

 private:
  std::string base_, prefix_;
  std::string out_;
};

}  // namespace

std::string render_prometheus(const EngineMetrics& m, const std::string& model_name,
                              const std::string& prefix) {
  Writer w(model_name, prefix);
  w.gauge("num_requests_running", double(m.num_requests_running),
          "Requests in the running batch (prefilling or decoding).");
  w.gauge("num_requests_waiting", double(m.num_requests_waiting),
          "Requests queued or preempted, waiting for admission.");
  w.gauge("kv_cache_usage_perc", m.kv_cache_usage_perc,
          "Fraction of KV cache pages referenced by sequences or pinned prefixes (0-1).");
  w.gauge("kv_cache_fragmentation", m.kv_cache_fragmentation,
          "Fraction of the rows of referenced KV pages that hold no token (0-1).");
  w.gauge("kv_cache_blocks", double(m.kv_cache_blocks), "KV cache pages in the pool.");
  w.gauge("num_pinned_prefixes", double(m.num_pinned_prefixes), "Pinned prefixes held.");
  w.counter("num_preemptions_total", double(m.num_preemptions),
            "Requests preempted (blocks released, to be recomputed).");
  w.counter("prompt_tokens_total", double(m.prompt_tokens), "Prompt tokens admitted.");
  w.counter("generation_tokens_total", double(m.generation_tokens), "Tokens generated.");
  w.head("request_success_total", "counter", "Finished requests by finish reason.");
  const char* reasons[] = {"stop", "length", "abort", "error"};
  for (size_t i = 0; i < m.request_success.size(); ++i)
    w.sample("request_success_total", double(m.request_success[i]),
             fmt::format("finished_reason=\"{}\"", reasons[i]));
  w.counter("prefix_cache_queries_total", double(m.prefix_cache_queries),
            "Tokens looked up in the prefix cache on admission.");
  w.counter("prefix_cache_hits_total", double(m.prefix_cache_hits),
            "Tokens served by the prefix cache on admission.");
  w.counter("engine_steps_total", double(m.steps), "Engine steps (forward passes).");
  w.head("mla_prefill_chunks_total", "counter",
         "Prefill chunks (more than one token) by MLA path.");
  w.sample("mla_prefill_chunks_total", double(m.absorbed_chunks), "path=\"absorbed\"");
  w.sample("mla_prefill_chunks_total", double(m.decompressed_chunks), "path=\"decompressed\"");
  w.counter("decode_tokens_total", double(m.decode_tokens),
            "Single-token chunks, run through the batched absorbed decode.");
  w.histogram("time_to_first_token_seconds", m.time_to_first_token,
              "Time from submit to the first generated token.");
  w.histogram("inter_token_latency_seconds", m.inter_token_latency,
              "Time between consecutive generated tokens of a request.");
  w.histogram("e2e_request_latency_seconds", m.e2e_request_latency,
              "Time from submit to the finish of a request.");
  w.histogram("request_queue_time_seconds", m.request_queue_time,
              "Time from submit to the first scheduled step.");
  w.histogram("iteration_tokens_total", m.iteration_tokens, "Tokens per engine step.");
  w.histogram("request_prompt_tokens", m.request_prompt_tokens,
              "Prompt tokens of each finished request.");
  w.histogram("request_generation_tokens", m.request_generation_tokens,
              "Generated tokens of each finished request.");
  w.histogram("request_prefill_time_seconds", m.request_prefill_time,
              "Time from a request's first scheduled step to its first token.");
  w.histogram("request_decode_time_seconds", m.request_decode_time,
              "Time from a request's first token to its finish.");
  w.histogram("request_inference_time_seconds", m.request_inference_time,
              "Time from a request's first scheduled step to its finish.");
  return w.take();
}

}  // namespace mla::sched
