#include "bench/serve_stats.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <random>

namespace mla::bench {

std::vector<double> arrival_offsets(int n, double rate, uint64_t seed) {
  std::vector<double> t(size_t(std::max(n, 0)), 0.0);
  if (n <= 0 || std::isinf(rate)) return t;
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> gap(rate);
  double sum = 0;
  for (double& v : t) v = sum += gap(rng);
  // Rescale so the schedule spans exactly n / rate, as vLLM does.
  const double scale = sum > 0 ? (double(n) / rate) / sum : 0;
  for (double& v : t) v *= scale;
  return t;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * double(v.size() - 1);
  const size_t lo = size_t(std::floor(rank));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (rank - double(lo));
}

void SseParser::feed(std::string_view bytes, const OnData& on_data) {
  for (char c : bytes) {
    // "\r\n" split across two pieces: the '\r' already ended the line, skip the '\n'.
    if (after_cr_) {
      after_cr_ = false;
      if (c == '\n') continue;
    }
    if (c == '\n' || c == '\r') {
      after_cr_ = c == '\r';
      line(partial_, on_data);
      partial_.clear();
    } else {
      partial_.push_back(c);
    }
  }
}

void SseParser::finish(const OnData& on_data) {
  if (!partial_.empty()) line(partial_, on_data);
  partial_.clear();
  line({}, on_data);  // the blank line the stream may have lacked
  after_cr_ = false;
}

void SseParser::line(std::string_view l, const OnData& on_data) {
  if (l.empty()) {
    if (has_data_) on_data(data_);
    data_.clear();
    has_data_ = false;
    return;
  }
  if (l.front() == ':') return;  // comment (keep-alive pings)
  const size_t colon = l.find(':');
  const std::string_view field = l.substr(0, colon);
  std::string_view value =
      colon == std::string_view::npos ? std::string_view{} : l.substr(colon + 1);
  if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  if (field != "data") return;  // event:, id:, retry: carry nothing we time
  if (has_data_) data_.push_back('\n');
  data_.append(value);
  has_data_ = true;
}

CompletionChunk parse_completion_chunk(std::string_view data) {
  CompletionChunk c;
  if (data == "[DONE]") {
    c.kind = CompletionChunk::Kind::kDone;
    return c;
  }
  const auto j = nlohmann::json::parse(data, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    c.kind = CompletionChunk::Kind::kError;
    c.error = "unreadable stream chunk: " + std::string(data.substr(0, 200));
    return c;
  }
  if (const auto e = j.find("error"); e != j.end() && !e->is_null()) {
    c.kind = CompletionChunk::Kind::kError;
    if (e->is_object() && e->contains("message") && (*e)["message"].is_string())
      c.error = (*e)["message"].get<std::string>();
    else
      c.error = e->is_string() ? e->get<std::string>() : e->dump();
    return c;
  }
  if (const auto u = j.find("usage"); u != j.end() && u->is_object()) {
    if (u->contains("completion_tokens") && (*u)["completion_tokens"].is_number_integer())
      c.completion_tokens = (*u)["completion_tokens"].get<int64_t>();
    if (u->contains("prompt_tokens") && (*u)["prompt_tokens"].is_number_integer())
      c.prompt_tokens = (*u)["prompt_tokens"].get<int64_t>();
  }
  if (const auto ch = j.find("choices"); ch != j.end() && ch->is_array() && !ch->empty()) {
    c.kind = CompletionChunk::Kind::kText;
    const auto& first = (*ch)[0];
    if (first.contains("text") && first["text"].is_string())
      c.text = first["text"].get<std::string>();
    // Chat: delta.content, and an R1 model's delta.reasoning_content, which is output too.
    if (const auto d = first.find("delta"); d != first.end() && d->is_object())
      for (const char* k : {"reasoning_content", "content"})
        if (d->contains(k) && (*d)[k].is_string()) c.text += (*d)[k].get<std::string>();
    c.finished = first.contains("finish_reason") && !first["finish_reason"].is_null();
  }
  return c;
}

void StreamRecorder::on_chunk(const CompletionChunk& c, double t) {
  if (done_) return;
  if (c.completion_tokens >= 0) {
    r_.output_tokens = c.completion_tokens;
    r_.usage_seen = true;
  }
  if (c.prompt_tokens >= 0) r_.prompt_tokens = c.prompt_tokens;
  switch (c.kind) {
    case CompletionChunk::Kind::kDone:
      done_ = true;
      break;
    case CompletionChunk::Kind::kError:
      if (r_.error.empty()) r_.error = c.error;
      break;
    case CompletionChunk::Kind::kText:
      // vLLM's method: every chunk with a choice is a token's arrival, also one with empty text
      // (a token whose bytes complete later); only a final chunk carrying nothing but the
      // finish_reason is not.
      if (c.text.empty() && c.finished) break;
      if (token_chunks_ == 0)
        r_.ttft = t;
      else
        r_.itl.push_back(t - last_);
      last_ = t;
      ++token_chunks_;
      r_.text += c.text;
      break;
    case CompletionChunk::Kind::kOther:
      break;
  }
}

RequestResult StreamRecorder::finish(const std::string& transport_error) {
  RequestResult r = std::move(r_);
  if (r.error.empty()) r.error = transport_error;
  if (r.error.empty() && token_chunks_ == 0) r.error = "no token chunk arrived";
  r.success = r.error.empty();
  r.latency = last_;
  // Without a usage chunk the best count we have is one token per text chunk (vLLM would
  // re-tokenise the text; we have no tokenizer here). compute_metrics flags it.
  if (!r.usage_seen) r.output_tokens = token_chunks_;
  return r;
}

Distribution distribution_ms(const std::vector<double>& seconds,
                             const std::vector<double>& percentiles) {
  Distribution d;
  d.at.assign(percentiles.size(), 0.0);
  if (seconds.empty()) return d;
  for (size_t i = 0; i < percentiles.size(); ++i)
    d.at[i] = percentile(seconds, percentiles[i]) * 1e3;
  double sum = 0, sq = 0;
  for (double v : seconds) sum += v;
  const double mean = sum / double(seconds.size());
  for (double v : seconds) sq += (v - mean) * (v - mean);
  d.mean = mean * 1e3;
  d.std = std::sqrt(sq / double(seconds.size())) * 1e3;  // population std, as np.std
  d.median = percentile(seconds, 50) * 1e3;
  d.p99 = percentile(seconds, 99) * 1e3;
  return d;
}

namespace {

// vLLM's peak output throughput and peak concurrency (ServeMetrics).
void peaks(const std::vector<RequestResult>& results, ServeMetrics* m) {
  double t0 = INFINITY, t1 = 0;
  for (const RequestResult& r : results)
    if (r.success) {
      t0 = std::min(t0, r.start);
      t1 = std::max(t1, r.start + r.latency);
    }
  if (!(t1 >= t0)) return;
  const size_t n = size_t(std::ceil(t1 - t0)) + 1;
  std::vector<double> tokens(n, 0.0), running(n, 0.0);
  for (const RequestResult& r : results) {
    if (!r.success) continue;
    double t = r.start + r.ttft;
    const auto add = [&](double at) {
      const size_t b = size_t(at - t0);
      if (b < n) tokens[b] += 1;
    };
    add(t);
    for (double gap : r.itl) add(t += gap);
    const size_t b0 = size_t(r.start - t0), b1 = std::min(n - 1, size_t(r.start + r.latency - t0));
    for (size_t b = b0; b <= b1; ++b) running[b] += 1;
  }
  m->max_output_tokens_per_s = *std::max_element(tokens.begin(), tokens.end());
  m->max_concurrent_requests = *std::max_element(running.begin(), running.end());
}

}  // namespace

ServeMetrics compute_metrics(const std::vector<RequestResult>& results, int64_t input_len,
                             double duration_s, const std::vector<double>& percentiles,
                             const Slo& slo) {
  ServeMetrics m;
  std::vector<double> ttft, tpot, itl, e2el;
  int good = 0;
  for (const RequestResult& r : results) {
    if (!r.success) {
      ++m.failed;
      if (m.first_error.empty()) m.first_error = r.error;
      continue;
    }
    ++m.completed;
    m.all_usage = m.all_usage && r.usage_seen;
    m.total_input += r.prompt_tokens >= 0 ? r.prompt_tokens : input_len;  // the server's count
    m.total_output += r.output_tokens;
    ttft.push_back(r.ttft);
    e2el.push_back(r.latency);
    const double request_tpot =
        r.output_tokens > 1 ? (r.latency - r.ttft) / double(r.output_tokens - 1) : 0.0;
    if (r.output_tokens > 1) tpot.push_back(request_tpot);
    itl.insert(itl.end(), r.itl.begin(), r.itl.end());
    if ((slo.ttft_ms < 0 || r.ttft * 1e3 <= slo.ttft_ms) &&
        (slo.tpot_ms < 0 || request_tpot * 1e3 <= slo.tpot_ms) &&
        (slo.e2el_ms < 0 || r.latency * 1e3 <= slo.e2el_ms))
      ++good;
  }
  m.duration_s = duration_s;
  if (duration_s > 0) {
    m.request_throughput = double(m.completed) / duration_s;
    m.output_throughput = double(m.total_output) / duration_s;
    m.total_token_throughput = double(m.total_input + m.total_output) / duration_s;
    if (slo.any()) m.request_goodput = double(good) / duration_s;
  }
  m.ttft = distribution_ms(ttft, percentiles);
  m.tpot = distribution_ms(tpot, percentiles);
  m.itl = distribution_ms(itl, percentiles);
  m.e2el = distribution_ms(e2el, percentiles);
  peaks(results, &m);
  return m;
}

}  // namespace mla::bench
