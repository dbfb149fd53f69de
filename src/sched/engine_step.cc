// One engine step: the scheduler's plan, one Model::forward over all its chunks, then for every
// sequence whose chunk reached its last known token: sample, detokenize, check stop conditions,
// emit the event. Metrics are gathered in a step-local EngineMetrics and committed once.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "sched/engine_impl.h"

namespace mla::sched {
namespace {

double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

template <typename T, typename U>
bool contains(const std::vector<T>& v, U x) {
  return std::find(v.begin(), v.end(), T(x)) != v.end();
}

}  // namespace

Usage Engine::Impl::usage_of(const LiveRequest& r) const {
  Usage u;
  u.prompt_tokens = r.seq.prompt_len;
  u.completion_tokens = r.generated;
  u.cached_tokens = std::max<int64_t>(0, r.seq.cached_tokens);
  u.num_preemptions = r.seq.num_preemptions;
  return u;
}

void Engine::Impl::finish(LiveRequest& r, FinishReason why, std::string error, RequestEvent ev,
                          Clock::time_point now, EngineMetrics* m, StatusCode pin_code) {
  for (auto& f : r.forks) {  // never started
    f->fork = true;
    finish(*f, why, error, {}, now, m, pin_code);
  }
  r.forks.clear();
  scheduler.finish(&r.seq);
  const RequestId id = r.seq.id;
  if (r.pin_done) {
    pin_results.emplace_back(
        std::move(*r.pin_done),
        Status(pin_code, fmt::format("pin_prefix: {}", error.empty() ? "cancelled" : error)));
  } else {
    ev.finish = why;
    ev.error = std::move(error);
    ev.usage = usage_of(r);
    m->count_finish(why);
    m->e2e_request_latency.observe(seconds(now - r.arrival));
    if (!r.fork) m->request_prompt_tokens.observe(double(r.seq.prompt_len));  // once per prompt
    m->request_generation_tokens.observe(double(r.generated));
    if (r.scheduled_once) m->request_inference_time.observe(seconds(now - r.first_scheduled));
    if (r.generated > 0) {
      m->request_prefill_time.observe(seconds(r.first_token - r.first_scheduled));
      m->request_decode_time.observe(seconds(now - r.first_token));
    }
    outbox.push_back({r.stream, std::move(ev)});
  }
  ++finished_in_step;
  live.erase(id);
}

void Engine::Impl::collect_prompt_logprobs(const StepPlan& plan, std::span<const int64_t> first_row,
                                           std::span<const float> logits) {
  const int64_t vocab = model.config().vocab_size;
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    const ScheduledChunk& c = plan.chunks[i];
    LiveRequest& r = *live.at(c.seq->id);
    if (r.req.prompt_logprobs < 0) continue;
    // Row k predicts token start + k + 1: a prompt token's logprob, until the prompt ends.
    for (int k = 0; k < c.n_tokens; ++k) {
      const int64_t target = c.start + k + 1;
      if (target >= c.seq->prompt_len || target < r.prompt_lps_next) continue;
      const std::span<const float> row(logits.data() + (first_row[i] + k) * vocab, size_t(vocab));
      r.prompt_lps.push_back(
          token_logprobs(row, c.seq->tokens[size_t(target)], r.req.prompt_logprobs));
      r.prompt_lps_next = target + 1;
    }
  }
}

void Engine::Impl::on_token(LiveRequest& r, int32_t token, std::span<const float> logits,
                            Clock::time_point now, EngineMetrics* m) {
  r.seq.tokens.push_back(token);
  ++r.generated;
  ++m->generation_tokens;
  if (r.generated == 1) {
    r.first_token = now;
    m->time_to_first_token.observe(seconds(now - r.arrival));
  } else {
    m->inter_token_latency.observe(seconds(now - r.last_token));
  }
  r.last_token = now;

  RequestEvent ev;
  ev.token_ids.push_back(token);
  if (r.generated == 1) ev.prompt_logprobs = std::move(r.prompt_lps);
  if (r.req.logprobs >= 0) ev.logprobs.push_back(token_logprobs(logits, token, r.req.logprobs));
  FinishReason why = FinishReason::kNone;
  bool stop_string = false;
  if ((!r.req.ignore_eos && contains(eos_ids, token)) || contains(r.req.stop_token_ids, token)) {
    why = FinishReason::kStop;  // the stop token's own text is not output
  } else if (r.decoder) {
    // An id past the tokenizer's (embeddings are often padded beyond it) has no text.
    if (Result<std::string> piece = r.decoder->push(token); piece.ok()) {
      ev.text = r.stops.push(*piece, &stop_string);
      if (stop_string) why = FinishReason::kStop;
    }
  }
  if (why == FinishReason::kNone && r.generated >= r.req.max_tokens) why = FinishReason::kLength;
  if (why == FinishReason::kNone) {
    ev.usage = usage_of(r);
    outbox.push_back({r.stream, std::move(ev)});
    return;
  }
  if (r.decoder && !stop_string) {  // the held-back text may still end in a stop string
    bool stopped = false;
    ev.text += r.stops.push(r.decoder->finish(), &stopped);
    if (stopped)
      why = FinishReason::kStop;
    else
      ev.text += r.stops.flush();
  }
  finish(r, why, "", std::move(ev), now, m);
}

void Engine::Impl::step() {
  EngineMetrics m;
  StepPlan plan = scheduler.schedule();
  m.num_preemptions += int64_t(plan.preempted.size());
  m.prefix_cache_queries += plan.prefix_queried_tokens;
  m.prefix_cache_hits += plan.prefix_hit_tokens;
  Clock::time_point now = Clock::now();
  for (Sequence* s : plan.refused)
    finish(*live.at(s->id), FinishReason::kError,
           fmt::format("request needs {} KV pages for {} tokens; {} of the {} pages are not held "
                       "by pinned prefixes",
                       scheduler.blocks_for(s->max_total), s->max_total, scheduler.usable_blocks(),
                       block_pool.num_blocks()),
           {}, now, &m);
  const size_t refused = plan.refused.size();
  plan.refused.clear();  // destroyed

  // The batch: each chunk's tokens, in plan order; block tables are final once planning is done.
  std::vector<int32_t> tokens;
  tokens.reserve(size_t(plan.num_tokens));
  ForwardBatch batch;
  for (const ScheduledChunk& c : plan.chunks) {
    const auto first = c.seq->tokens.begin() + c.start;
    tokens.insert(tokens.end(), first, first + c.n_tokens);
    batch.seqs.push_back({c.seq->blocks.block_table(), c.start, c.n_tokens});
    LiveRequest& r = *live.at(c.seq->id);
    if (!r.scheduled_once) {
      r.scheduled_once = true;
      r.first_scheduled = now;
      m.request_queue_time.observe(seconds(now - r.arrival));
      if (!r.pin_done) m.prompt_tokens += r.seq.prompt_len;
    }
  }
  batch.tokens = tokens;
  // Prompt logprobs need the logits of every row: then the whole batch computes them all.
  for (const ScheduledChunk& c : plan.chunks) {
    const LiveRequest& r = *live.at(c.seq->id);
    if (r.req.prompt_logprobs >= 0 && c.start + 1 < c.seq->prompt_len) batch.all_logits = true;
  }
  // The row of each chunk's first token in the logits.
  std::vector<int64_t> first_row(plan.chunks.size());
  for (size_t i = 0, row = 0; i < plan.chunks.size(); ++i) {
    first_row[i] = batch.all_logits ? int64_t(row) : int64_t(i);
    row += size_t(plan.chunks[i].n_tokens);
  }

  ForwardStats fs;
  if (!plan.chunks.empty()) {
    Status injected = options.before_forward ? options.before_forward(plan) : Status();
    Result<ForwardStats> st =
        injected.ok() ? model.forward(batch, cache, *pool, logits) : Result<ForwardStats>(injected);
    now = Clock::now();
    // forward rejects only batches the scheduler should never build: fail this step's requests
    // (their rows are not registered with the prefix cache) and keep serving the others.
    if (!st.ok()) {
      for (const ScheduledChunk& c : plan.chunks)
        finish(*live.at(c.seq->id), FinishReason::kError, st.status().message(), {}, now, &m,
               st.status().code());
      commit(m);
      return;
    }
    fs = *st;
    scheduler.on_step_done(plan);
    ++m.steps;
    m.iteration_tokens.observe(double(plan.num_tokens));
    m.absorbed_chunks += fs.absorbed_chunks;
    m.decompressed_chunks += fs.decompressed_chunks;
    m.decode_tokens += fs.decode_tokens;
  }
  if (options.on_step) {
    StepInfo info;
    info.plan = &plan;
    info.forward = fs;
    info.pool = &block_pool;
    info.running = scheduler.num_running();
    info.waiting = scheduler.num_waiting();
    info.refused = refused;
    options.on_step(info);
  }

  const int64_t vocab = model.config().vocab_size;
  if (batch.all_logits) collect_prompt_logprobs(plan, first_row, logits);
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    Sequence* seq = plan.chunks[i].seq;
    if (seq->remaining() > 0) continue;  // a prefill chunk short of the last token
    LiveRequest& r = *live.at(seq->id);
    if (r.pin_done) {
      scheduler.pin(seq);
      pin_results.emplace_back(std::move(*r.pin_done), seq->id);
      ++finished_in_step;
      pinned.emplace(seq->id, std::move(live.at(seq->id)));
      live.erase(seq->id);
      continue;
    }
    const int64_t last = first_row[i] + (batch.all_logits ? plan.chunks[i].n_tokens - 1 : 0);
    const std::span<const float> row(logits.data() + last * vocab, size_t(vocab));
    // NaN logits (NaN or Inf weights are valid in a checkpoint) fail this request alone
    // (docs/RELIABILITY.md §Checklist R20); the others in the batch carry on.
    if (std::any_of(row.begin(), row.end(), [](float v) { return std::isnan(v); })) {
      finish(r, FinishReason::kError, "numerical error: the logits contain NaN", {}, now, &m);
      continue;
    }
    // The prompt is computed: the other samples of it (submit_n) fork its pages here and
    // sample from the same logits row, each with its own sampler.
    std::vector<LiveRequest*> samples = {&r};
    for (std::unique_ptr<LiveRequest>& f : r.forks) {
      scheduler.add_fork(&f->seq, seq);
      f->scheduled_once = true;  // its prompt was counted with the first sample's
      f->first_scheduled = r.first_scheduled;
      f->fork = true;
      samples.push_back(f.get());
      live.emplace(f->seq.id, std::move(f));
    }
    r.forks.clear();
    for (LiveRequest* s : samples)  // every sample reports the prompt's logprobs
      if (s != &r) s->prompt_lps = r.prompt_lps;
    for (LiveRequest* s : samples) {
      Result<int32_t> token = s->sampler.sample(row);
      if (!token.ok()) {
        finish(*s, FinishReason::kError, token.status().message(), {}, now, &m,
               token.status().code());
        continue;
      }
      on_token(*s, *token, row, now, &m);
    }
  }
  commit(m);
}

}  // namespace mla::sched
