// Engine: creation, the frontend calls (any thread), the engine thread's loop and shutdown. The
// step itself is engine_step.cc.
#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "core/check.h"
#include "sched/engine_impl.h"

namespace mla::sched {

LiveRequest::LiveRequest(RequestId id, Request r, int64_t max_total, BlockPool* pool,
                         KvCacheStorage* storage)
    : seq(id, r.prompt, max_total, pool, storage),
      req(std::move(r)),
      sampler(req.sampling),
      stops(req.stop, req.include_stop_str_in_output) {
  sampler.set_prompt(req.prompt);
}

void Inbox::request_cancel(RequestId id) {
  {
    std::lock_guard lock(mu);
    cancels.push_back(id);
  }
  cv.notify_one();
}

Engine::Impl::Impl(Model& m, const EngineOptions& o, const tok::Tokenizer* t, ThreadPool* p,
                   BlockPool bp, KvCacheStorage c)
    : model(m),
      options(o),
      tokenizer(t),
      pool(p),
      block_pool(std::move(bp)),
      cache(std::move(c)),
      scheduler(o.scheduler, &block_pool, &cache, o.prefix_cache),
      max_context(m.max_context()),
      num_blocks(block_pool.num_blocks()),
      page_size(block_pool.page_size()),
      eos_ids(m.config().eos_token_ids) {
  pool_stats = block_pool.stats();
  metrics.kv_cache_blocks = block_pool.num_blocks();
  thread = std::thread([this] { loop(); });
}

Result<std::unique_ptr<Engine>> Engine::create(Model& model, const EngineOptions& options,
                                               const tok::Tokenizer* tokenizer, ThreadPool* pool) {
  MLA_RETURN_IF_ERROR(validate(options.scheduler));
  MLA_RETURN_IF_ERROR(validate_page_size(options.page_size));
  int32_t blocks = options.num_blocks;
  if (blocks < 0) return invalid_argument(fmt::format("num_blocks is {}", blocks));
  const KvCacheShape one = model.cache_shape(1, options.page_size);
  if (blocks == 0) {
    MLA_ASSIGN_OR_RETURN(blocks, num_blocks_for_budget(options.kv_cache_bytes, one.record_bytes,
                                                       one.num_layers, options.page_size));
  }
  MLA_ASSIGN_OR_RETURN(BlockPool block_pool, BlockPool::create(blocks, options.page_size));
  MLA_ASSIGN_OR_RETURN(KvCacheStorage cache,
                       KvCacheStorage::allocate(model.cache_shape(blocks, options.page_size)));
  auto impl =
      std::make_unique<Impl>(model, options, tokenizer, pool ? pool : &default_thread_pool(),
                             std::move(block_pool), std::move(cache));
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Engine::~Engine() {
  {
    std::lock_guard lock(impl_->inbox->mu);
    impl_->inbox->stopping = true;
  }
  impl_->inbox->cv.notify_one();
  impl_->thread.join();
}

Result<std::unique_ptr<LiveRequest>> Engine::Impl::make_request(Request request,
                                                                EventCallback callback) {
  Impl& e = *this;
  MLA_RETURN_IF_ERROR(validate(request, e.model.config().vocab_size));
  if (!request.stop.empty() && !e.tokenizer)
    return invalid_argument("request: stop strings need an engine with a tokenizer");
  const int64_t prompt = int64_t(request.prompt.size());
  const int64_t total = prompt + request.max_tokens;
  if (total > e.max_context)
    return invalid_argument(fmt::format(
        "This model's maximum context length is {} tokens. However, you requested {} tokens ({} "
        "in the prompt, {} for the completion).",
        e.max_context, total, prompt, request.max_tokens));
  const int64_t need = (total + e.page_size - 1) / e.page_size;
  if (need > e.num_blocks)
    return invalid_argument(fmt::format(
        "request: {} tokens ({} prompt + {} max_tokens) need {} KV pages of {} tokens; the "
        "cache holds {} pages",
        total, prompt, request.max_tokens, need, e.page_size, e.num_blocks));
  // min_tokens holds back what would end the reply: the EOS ids (unless ignored) and the
  // request's stop_token_ids (vLLM's meaning; stop strings still end it).
  if (request.sampling.min_tokens > 0) {
    std::vector<int32_t>& blocked = request.sampling.min_tokens_blocked;
    blocked = request.stop_token_ids;
    if (!request.ignore_eos)
      for (int64_t id : e.eos_ids)
        if (id >= 0 && id < e.model.config().vocab_size) blocked.push_back(int32_t(id));
  }
  // A constrained reply may end (EOS, a stop id) only once its grammar is whole.
  if (request.sampling.constraint) {
    std::vector<int32_t>& ends = request.sampling.constraint_end_ids;
    ends = request.stop_token_ids;
    for (int64_t id : e.eos_ids)
      if (id >= 0 && id < e.model.config().vocab_size) ends.push_back(int32_t(id));
  }
  const RequestId id = e.next_id.fetch_add(1);
  auto live = std::make_unique<LiveRequest>(id, std::move(request), total, &e.block_pool, &e.cache);
  live->stream = std::make_shared<RequestStream>(id, std::move(callback), e.inbox);
  live->seq.skip_prefix_cache = live->req.prompt_logprobs >= 0;
  if (live->req.prompt_logprobs >= 0) {
    TokenLogprobs first;
    first.token = live->req.prompt[0];
    first.rank = 0;
    first.logprob = std::numeric_limits<float>::quiet_NaN();
    live->prompt_lps.push_back(std::move(first));
  }
  if (e.tokenizer)
    live->decoder.emplace(*e.tokenizer,
                          tok::DecodeOptions{.skip_special = live->req.skip_special_tokens});
  live->arrival = Clock::now();
  return live;
}

Status Engine::Impl::enqueue(std::unique_ptr<LiveRequest> r, int64_t streams) {
  {
    std::lock_guard lock(inbox->mu);
    if (inbox->stopping) return Status(StatusCode::kResourceExhausted, "the engine is stopping");
    inbox->submitted.push_back(std::move(r));
    inbox->outstanding += streams;
  }
  inbox->cv.notify_one();
  return Status();
}

Result<std::shared_ptr<RequestStream>> Engine::submit(Request request, EventCallback callback) {
  MLA_ASSIGN_OR_RETURN(std::unique_ptr<LiveRequest> live,
                       impl_->make_request(std::move(request), std::move(callback)));
  std::shared_ptr<RequestStream> stream = live->stream;
  MLA_RETURN_IF_ERROR(impl_->enqueue(std::move(live), 1));
  return stream;
}

Result<std::vector<std::shared_ptr<RequestStream>>> Engine::submit_n(
    Request request, int n, std::vector<EventCallback> callbacks) {
  if (n < 1 || n > kMaxSamplesPerPrompt)
    return invalid_argument(
        fmt::format("n is {}; between 1 and {} samples of a prompt", n, kMaxSamplesPerPrompt));
  const int max_seqs = impl_->scheduler.options().max_num_seqs;  // fixed at creation
  if (n > max_seqs)
    return invalid_argument(fmt::format(
        "n is {}; the engine runs at most {} sequences at once (max_num_seqs)", n, max_seqs));
  if (callbacks.size() > size_t(n))
    return invalid_argument(fmt::format("{} callbacks for n = {}", callbacks.size(), n));
  callbacks.resize(size_t(n));
  std::vector<std::unique_ptr<LiveRequest>> reqs;
  std::vector<std::shared_ptr<RequestStream>> streams;
  const uint64_t seed = request.sampling.seed;
  for (int i = 0; i < n; ++i) {
    Request r = request;
    r.sampling.seed = seed + uint64_t(i);  // each sample its own random stream
    MLA_ASSIGN_OR_RETURN(std::unique_ptr<LiveRequest> live,
                         impl_->make_request(std::move(r), std::move(callbacks[size_t(i)])));
    streams.push_back(live->stream);
    reqs.push_back(std::move(live));
  }
  // The first sample carries the others until its prompt is computed (engine_step.cc forks them).
  std::unique_ptr<LiveRequest> first = std::move(reqs.front());
  for (size_t i = 1; i < reqs.size(); ++i) first->forks.push_back(std::move(reqs[i]));
  first->seq.pending_forks = n - 1;
  MLA_RETURN_IF_ERROR(impl_->enqueue(std::move(first), n));
  return streams;
}

void Engine::cancel(RequestId id) {
  impl_->inbox->request_cancel(id);
}

Result<PrefixId> Engine::pin_prefix(std::vector<int32_t> tokens) {
  Impl& e = *impl_;
  Request r;
  r.prompt = std::move(tokens);
  MLA_RETURN_IF_ERROR(validate(r, e.model.config().vocab_size));
  const int64_t n = int64_t(r.prompt.size());
  if (n < e.page_size)
    return invalid_argument(fmt::format(
        "pin_prefix: {} tokens; only full pages of {} tokens are kept", n, e.page_size));
  if (n > e.max_context || (n + e.page_size - 1) / e.page_size > e.num_blocks)
    return invalid_argument(fmt::format(
        "pin_prefix: {} tokens exceed the context ({}) or the KV cache ({} pages of {})", n,
        e.max_context, e.num_blocks, e.page_size));
  const RequestId id = e.next_id.fetch_add(1);
  auto live = std::make_unique<LiveRequest>(id, std::move(r), n, &e.block_pool, &e.cache);
  live->arrival = Clock::now();
  live->pin_done.emplace();
  std::future<Result<PrefixId>> done = live->pin_done->get_future();
  {
    std::lock_guard lock(e.inbox->mu);
    if (e.inbox->stopping) return Status(StatusCode::kResourceExhausted, "the engine is stopping");
    e.inbox->submitted.push_back(std::move(live));
    ++e.inbox->outstanding;
  }
  e.inbox->cv.notify_one();
  return done.get();
}

Status Engine::unpin_prefix(PrefixId id) {
  std::promise<Status> promise;
  std::future<Status> done = promise.get_future();
  {
    std::lock_guard lock(impl_->inbox->mu);
    if (impl_->inbox->stopping)
      return Status(StatusCode::kResourceExhausted, "the engine is stopping");
    impl_->inbox->unpins.emplace_back(id, std::move(promise));
  }
  impl_->inbox->cv.notify_one();
  return done.get();
}

void Engine::wait_idle() const {
  std::unique_lock lock(impl_->inbox->mu);
  impl_->inbox->idle_cv.wait(lock, [&] { return impl_->inbox->outstanding == 0; });
}

EngineMetrics Engine::metrics() const {
  std::lock_guard lock(impl_->metrics_mu);
  return impl_->metrics;
}

BlockPoolStats Engine::cache_stats() const {
  std::lock_guard lock(impl_->metrics_mu);
  return impl_->pool_stats;
}

int32_t Engine::num_blocks() const {
  return impl_->num_blocks;
}
int Engine::page_size() const {
  return impl_->page_size;
}
const SchedulerOptions& Engine::scheduler_options() const {
  return impl_->scheduler.options();
}

bool Engine::Impl::take_inbox(std::vector<std::unique_ptr<LiveRequest>>* submitted,
                              std::vector<RequestId>* cancels,
                              std::vector<std::pair<PrefixId, std::promise<Status>>>* unpins) {
  std::unique_lock lock(inbox->mu);
  // live and the scheduler are the engine thread's own, so reading them here is race-free.
  const bool busy = scheduler.num_running() + scheduler.num_waiting() > 0;
  if (!busy)
    inbox->cv.wait(lock, [&] {
      return inbox->stopping || !inbox->submitted.empty() || !inbox->cancels.empty() ||
             !inbox->unpins.empty();
    });
  submitted->swap(inbox->submitted);
  cancels->swap(inbox->cancels);
  unpins->swap(inbox->unpins);
  return !inbox->stopping;
}

void Engine::Impl::loop() {
  for (;;) {
    std::vector<std::unique_ptr<LiveRequest>> submitted;
    std::vector<RequestId> cancels;
    std::vector<std::pair<PrefixId, std::promise<Status>>> unpins;
    const bool running = take_inbox(&submitted, &cancels, &unpins);
    for (auto& r : submitted) {
      scheduler.add(&r->seq);
      const RequestId id = r->seq.id;
      live.emplace(id, std::move(r));
    }
    EngineMetrics m;
    for (RequestId id : cancels) {
      if (auto it = live.find(id); it != live.end()) {
        if (!it->second->pin_done)
          finish(*it->second, FinishReason::kCancelled, "", {}, Clock::now(), &m);
        continue;
      }
      // A sample of a prompt still being computed: not started, it ends alone.
      for (auto& [parent_id, parent] : live) {
        auto& forks = parent->forks;
        auto f = std::find_if(forks.begin(), forks.end(),
                              [&](const auto& x) { return x->seq.id == id; });
        if (f == forks.end()) continue;
        finish(**f, FinishReason::kCancelled, "", {}, Clock::now(), &m);
        forks.erase(f);
        --parent->seq.pending_forks;  // its running slot is free again
        break;
      }
    }
    std::vector<Status> unpinned;
    for (auto& [id, promise] : unpins) {
      auto it = pinned.find(id);
      if (it == pinned.end()) {
        unpinned.push_back(not_found(fmt::format("unpin_prefix: no pinned prefix {}", id)));
        continue;
      }
      scheduler.unpin(&it->second->seq);
      pinned.erase(it);
      unpinned.push_back(Status());
    }
    commit(m);
    for (size_t i = 0; i < unpins.size(); ++i) unpins[i].second.set_value(unpinned[i]);
    if (!running) break;
    if (scheduler.num_running() + scheduler.num_waiting() > 0) step();
  }
  shutdown();
}

void Engine::Impl::shutdown() {
  EngineMetrics m;
  while (!live.empty())
    finish(*live.begin()->second, FinishReason::kCancelled, "the engine stopped", {}, Clock::now(),
           &m);
  for (auto& [id, r] : pinned) scheduler.unpin(&r->seq);
  pinned.clear();
  commit(m);
}

void Engine::Impl::commit(const EngineMetrics& delta) {
  {
    std::lock_guard lock(metrics_mu);
    metrics.accumulate(delta);
    pool_stats = block_pool.stats();
    metrics.num_requests_running = int64_t(scheduler.num_running());
    metrics.num_requests_waiting = int64_t(scheduler.num_waiting());
    metrics.kv_cache_usage_perc = double(pool_stats.pages_used) / double(pool_stats.num_blocks);
    metrics.kv_cache_fragmentation = pool_stats.internal_fragmentation;
    metrics.num_pinned_prefixes = int64_t(pinned.size());
  }
  std::vector<Outgoing> out;
  out.swap(outbox);
  for (Outgoing& o : out) o.stream->deliver(std::move(o.event));
  if (const int64_t done = std::exchange(finished_in_step, 0); done > 0) {
    {
      std::lock_guard lock(inbox->mu);
      inbox->outstanding -= done;
    }
    inbox->idle_cv.notify_all();
  }
  for (auto& [promise, result] : std::exchange(pin_results, {})) promise.set_value(result);
}

}  // namespace mla::sched
