// POST /v1/chat/completions and /v1/completions: parse, admit (429 past the queue limit), submit
// one engine request per choice, then answer in one JSON object or as a server-sent event stream.
// Between engine events the handler polls its socket, so a client that leaves (during prefill
// too) has its requests cancelled and its KV pages freed within one poll interval.
#include <fmt/format.h>

#include "server/connection_watch.h"
#include "server/openai_response.h"
#include "server/server_state.h"

namespace mla::server {
namespace {

using nlohmann::json;

// How often a waiting handler looks at its socket.
constexpr std::chrono::milliseconds kPollInterval{20};

ApiError engine_error(const sched::RequestOutput& o) {
  ApiError e;
  if (o.finish == sched::FinishReason::kCancelled) {
    e.status = 503;
    e.type = "service_unavailable";
    e.message = "the request was cancelled: the server is shutting down";
  } else {
    e.status = 500;
    e.type = "internal_error";
    e.message = o.error.empty() ? "the request failed" : o.error;
  }
  return e;
}

bool failed(sched::FinishReason r) {
  return r == sched::FinishReason::kCancelled || r == sched::FinishReason::kError;
}

struct Admitted {
  std::shared_ptr<CompletionJob> job;
  std::shared_ptr<void> tracking;
  int fd = -1;
};

// The next event of the job, or false once the client has gone. The socket is looked at every
// kPollInterval whether or not events keep coming (a fast decode never lets a wait time out).
class EventPump {
 public:
  explicit EventPump(const Admitted& a) : a_(a), next_check_(Clock::now() + kPollInterval) {}
  bool next(CompletionJob::Event* ev) {
    for (;;) {
      const bool got = a_.job->wait_event(kPollInterval, ev);
      if (!got || Clock::now() >= next_check_) {
        if (peer_closed(a_.fd)) return false;
        next_check_ = Clock::now() + kPollInterval;
      }
      if (got) return true;
    }
  }

 private:
  using Clock = std::chrono::steady_clock;
  const Admitted& a_;
  Clock::time_point next_check_;
};

// One engine request per prompt, or n samples of it (Engine::submit_n: the prompt is computed
// once and the samples fork its pages); choice c is sample c % n of prompt c / n.
std::optional<ApiError> submit_all(HttpServer::State& st, const CompletionSpec& spec,
                                   const std::shared_ptr<CompletionJob>& job) {
  for (size_t i = 0; i < spec.prompts.size(); ++i) {
    sched::Request r = spec.request;
    r.prompt = spec.prompts[i];
    std::vector<sched::EventCallback> callbacks;
    for (int j = 0; j < spec.n; ++j)
      callbacks.push_back(CompletionJob::callback(job, int(i) * spec.n + j));
    auto s = st.backend.engine->submit_n(std::move(r), spec.n, std::move(callbacks));
    if (!s.ok()) {
      job->cancel_all();
      ApiError e = bad_request("", s.status().message());
      if (s.status().code() == StatusCode::kResourceExhausted) {
        e.status = 503;
        e.type = "service_unavailable";
      }
      return e;
    }
    for (auto& stream : *s) job->add_stream(std::move(stream));
  }
  return std::nullopt;
}

// The usage a choice adds to the response's: the samples of one prompt after its first add
// their completion only (the prompt was computed once).
sched::Usage choice_usage(const CompletionSpec& spec, size_t choice, sched::Usage u) {
  if (choice % size_t(spec.n) != 0) u.prompt_tokens = u.cached_tokens = 0;
  return u;
}

// A completion's echo text per choice (the prompt's text), or none.
std::vector<std::string> echo_per_choice(const CompletionSpec& spec) {
  std::vector<std::string> out;
  if (spec.echo_texts.empty()) return out;
  for (size_t c = 0; c < spec.num_choices(); ++c)
    out.push_back(spec.echo_texts[c / size_t(spec.n)]);
  return out;
}

void answer_whole(const CompletionSpec& spec, const ResponseMeta& meta, Admitted a,
                  httplib::Response& res) {
  std::vector<sched::RequestOutput> outputs(spec.num_choices());
  size_t done = 0;
  CompletionJob::Event ev;
  EventPump pump(a);
  while (done < outputs.size()) {
    if (!pump.next(&ev)) {
      a.job->cancel_all();  // nobody to answer; the pages are freed before the next step
      res.status = 499;
      return;
    }
    outputs[size_t(ev.choice)].add(ev.event);
    if (ev.event.finish != sched::FinishReason::kNone) ++done;
  }
  for (const sched::RequestOutput& o : outputs)
    if (failed(o.finish)) return send_error(res, engine_error(o));
  for (size_t c = 0; c < outputs.size(); ++c)
    outputs[c].usage = choice_usage(spec, c, outputs[c].usage);
  if (spec.keep == 0)
    return send_json(res, 200, completion_response(meta, outputs, echo_per_choice(spec)));
  // best_of: each prompt's `keep` samples of the highest cumulative logprob, best first; the
  // usage counts every sample.
  std::vector<sched::Usage> usage;
  for (const sched::RequestOutput& o : outputs) usage.push_back(o.usage);
  const std::vector<std::string> echo = echo_per_choice(spec);
  std::vector<sched::RequestOutput> kept;
  std::vector<std::string> kept_echo;
  const auto cumulative = [](const sched::RequestOutput& o) {
    double sum = 0;
    for (const TokenLogprobs& lp : o.logprobs) sum += lp.logprob;
    return sum;
  };
  for (size_t p = 0; p < spec.prompts.size(); ++p) {
    std::vector<size_t> order(size_t(spec.n));
    for (size_t j = 0; j < order.size(); ++j) order[j] = p * size_t(spec.n) + j;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return cumulative(outputs[a]) > cumulative(outputs[b]);
    });
    for (size_t j = 0; j < size_t(spec.keep); ++j) {
      kept.push_back(std::move(outputs[order[j]]));
      if (!echo.empty()) kept_echo.push_back(echo[order[j]]);
    }
  }
  send_json(res, 200, completion_response(meta, kept, kept_echo, usage));
}

// Writes the event stream; false when the client is gone (its requests are then cancelled).
bool write_stream(const CompletionSpec& spec, const ResponseMeta& meta, const Admitted& a,
                  httplib::DataSink& sink) {
  static constexpr std::string_view kDone = "data: [DONE]\n\n";
  auto send = [&](const json& j) {
    const std::string s = "data: " + dump_json(j) + "\n\n";
    return sink.write(s.data(), s.size());
  };
  const size_t n = spec.num_choices();
  const bool chat = spec.endpoint == Endpoint::kChat;
  const std::vector<std::string> echo = echo_per_choice(spec);
  std::vector<sched::Usage> usage(n);
  std::vector<int64_t> offsets(n, 0);  // legacy logprobs text_offset
  // Chat replies with reasoning or tools parse per choice (reply_parser.h).
  std::vector<ReplyParser> parsers;
  if (chat && (meta.reply.reasoning || meta.reply.tools))
    for (size_t i = 0; i < n; ++i) parsers.emplace_back(meta.reply);
  std::vector<int> next_call(n, 0);  // delta.tool_calls[].index
  // Echo with logprobs: the echo goes out with the prompt's logprobs, on the first event.
  const bool echo_logprobs =
      !echo.empty() && meta.logprobs == LogprobsStyle::kLegacy && spec.request.prompt_logprobs >= 0;
  for (size_t i = 0; i < n; ++i) {
    ChunkContent c;
    c.role = chat;  // the first delta carries the role only
    if (i < echo.size() && !echo_logprobs) c.text = echo[i];
    offsets[i] = int64_t(c.text.size());
    if ((c.role || !c.text.empty()) && !send(stream_chunk(meta, int(i), c, spec.include_usage)))
      return false;
  }
  size_t done = 0;
  CompletionJob::Event ev;
  EventPump pump(a);
  while (done < n) {
    if (!pump.next(&ev)) return false;
    const sched::RequestEvent& e = ev.event;
    const size_t i = size_t(ev.choice);
    usage[i] = choice_usage(spec, i, e.usage);
    if (failed(e.finish)) {
      sched::RequestOutput o;
      o.add(e);
      a.job->cancel_all();
      // The status is sent already: one error event, then the end (docs/SERVING.md §Errors).
      return send(error_json(engine_error(o))) && sink.write(kDone.data(), kDone.size());
    }
    const bool final = e.finish != sched::FinishReason::kNone;
    if (echo_logprobs && !e.prompt_logprobs.empty()) {
      ChunkContent ec;
      ec.text = echo[i];
      offsets[i] = 0;
      ec.logprobs = echo_prompt_logprobs_json(meta, e.prompt_logprobs, &offsets[i]);
      if (!send(stream_chunk(meta, int(i), ec, spec.include_usage))) return false;
    }
    ChunkContent c;
    if (meta.prompt_logprobs && !e.prompt_logprobs.empty())
      c.prompt_logprobs = prompt_logprobs_json(meta, e.prompt_logprobs);
    std::vector<ParsedToolCall> calls;
    if (parsers.empty()) {
      c.text = e.text;
    } else {
      ReplyParser::Parts parts = parsers[i].feed(e.text);
      if (final) {  // held-back text that never became a tag or a call
        ReplyParser::Parts rest = parsers[i].finish();
        parts.reasoning += rest.reasoning;
        parts.content += rest.content;
        for (ParsedToolCall& call : rest.calls) parts.calls.push_back(std::move(call));
      }
      c.text = std::move(parts.content);
      c.reasoning = std::move(parts.reasoning);
      calls = std::move(parts.calls);
    }
    if (meta.logprobs != LogprobsStyle::kNone && !e.logprobs.empty()) {
      c.logprobs = logprobs_json(meta, e.token_ids, e.logprobs, &offsets[i]);
    }
    // Completions stream one chunk per token, its text possibly empty (an unfinished UTF-8
    // sequence, an id without text), as vLLM does: benchmark clients time every chunk. Chat sends
    // only deltas with content.
    if (!c.text.empty() || !c.reasoning.empty() || !c.logprobs.is_null() ||
        !c.prompt_logprobs.is_null() || (!chat && !e.token_ids.empty())) {
      if (!send(stream_chunk(meta, int(i), c, spec.include_usage))) return false;
    }
    for (const ParsedToolCall& call : calls) {  // whole calls: the name, then the arguments
      ChunkContent head, args;
      head.tool_calls = tool_call_header_delta(next_call[i], call);
      args.tool_calls = tool_call_arguments_delta(next_call[i]++, call);
      if (!send(stream_chunk(meta, int(i), head, spec.include_usage)) ||
          !send(stream_chunk(meta, int(i), args, spec.include_usage)))
        return false;
    }
    if (final) {
      ChunkContent f;
      f.finish = finish_reason_json(e.finish, parsers.empty() ? 0 : parsers[i].calls_returned());
      if (!send(stream_chunk(meta, int(i), f, spec.include_usage))) return false;
      ++done;
    }
  }
  if (spec.include_usage && !send(usage_chunk(meta, usage))) return false;
  return sink.write(kDone.data(), kDone.size());
}

void handle_completion(const std::shared_ptr<HttpServer::State>& state, Endpoint endpoint,
                       const httplib::Request& req, httplib::Response& res) {
  HttpServer::State& st = *state;
  json body;
  if (auto e = parse_json_object(req.body, &body)) return send_error(res, *e);
  auto spec = std::make_shared<CompletionSpec>();
  if (auto e = parse_completion_request(endpoint, body, st.backend.model, spec.get(), req.body))
    return send_error(res, *e);

  const int64_t limit = st.backend.engine->scheduler_options().max_num_seqs + st.options.max_queue;
  if (int64_t(spec->num_choices()) > limit)  // 429 would ask it to retry for ever
    return send_error(
        res, bad_request(spec->n > 1 ? "n" : "prompt",
                         fmt::format("the request has {} choices; this server holds at most {} "
                                     "sequences running or queued",
                                     spec->num_choices(), limit)));
  Admitted a;
  a.job = std::make_shared<CompletionJob>();
  a.tracking = st.admit(a.job, int64_t(spec->num_choices()), limit);
  if (!a.tracking) {
    ApiError e;
    e.status = 429;
    e.type = "rate_limit_error";
    e.code = "queue_full";
    e.message = fmt::format(
        "the server is at capacity ({} sequences running or queued; this request has {}); retry "
        "later",
        limit, spec->num_choices());
    res.set_header("Retry-After", "1");
    return send_error(res, e);
  }
  if (auto e = submit_all(st, *spec, a.job)) return send_error(res, *e);
  a.fd = ConnectionServer::current_fd();
  const ResponseMeta meta = make_response_meta(*spec, st.backend.model);
  if (!spec->stream) return answer_whole(*spec, meta, std::move(a), res);

  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider("text/event-stream",
                                   [spec, meta, a](size_t, httplib::DataSink& sink) {
                                     if (!write_stream(*spec, meta, a, sink)) {
                                       a.job->cancel_all();
                                       return false;
                                     }
                                     sink.done();
                                     return true;
                                   });
}

}  // namespace

sched::EventCallback CompletionJob::callback(const std::shared_ptr<CompletionJob>& job,
                                             int choice) {
  return [weak = std::weak_ptr<CompletionJob>(job), choice](const sched::RequestEvent& e) {
    std::shared_ptr<CompletionJob> j = weak.lock();
    if (!j) return;
    {
      std::lock_guard lock(j->mu_);
      j->events_.push_back({choice, e});
    }
    j->cv_.notify_one();
  };
}

void CompletionJob::add_stream(std::shared_ptr<sched::RequestStream> s) {
  std::lock_guard lock(mu_);
  streams_.push_back(std::move(s));
}

bool CompletionJob::wait_event(std::chrono::milliseconds timeout, Event* out) {
  std::unique_lock lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return false;
  *out = std::move(events_.front());
  events_.pop_front();
  return true;
}

void CompletionJob::cancel_all() {
  std::vector<std::shared_ptr<sched::RequestStream>> streams;
  {
    std::lock_guard lock(mu_);
    streams = streams_;
  }
  for (auto& s : streams) s->cancel();  // finished streams ignore it
}

CompletionJob::~CompletionJob() {
  cancel_all();
}

void add_completion_routes(const std::shared_ptr<HttpServer::State>& state) {
  std::weak_ptr<HttpServer::State> weak = state;
  state->http.Post("/v1/chat/completions", [weak](const httplib::Request& q, httplib::Response& r) {
    if (auto s = weak.lock()) {
      if (s->deadlines) s->deadlines->handling(q.remote_addr, q.remote_port);
      handle_completion(s, Endpoint::kChat, q, r);
    }
  });
  state->http.Post("/v1/completions", [weak](const httplib::Request& q, httplib::Response& r) {
    if (auto s = weak.lock()) {
      if (s->deadlines) s->deadlines->handling(q.remote_addr, q.remote_port);
      handle_completion(s, Endpoint::kCompletions, q, r);
    }
  });
}

}  // namespace mla::server
