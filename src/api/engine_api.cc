// The public API (include/mla/engine.h) as a thin layer over Model (src/model), the tokenizer
// and chat formats (src/tokenizer) and the serving engine (src/sched).
#include "mla/engine.h"

#include <fmt/format.h>

#include <filesystem>
#include <random>
#include <string_view>

#include "core/kv_format.h"
#include "core/thread_pool.h"
#include "io/tune_file.h"
#include "model/model_runtime.h"
#include "sched/engine.h"
#include "tokenizer/chat_format.h"
#include "tokenizer/tokenizer_config.h"

namespace mla::api {

struct Model::Impl {
  std::unique_ptr<mla::Model> model;
  std::optional<tok::LoadedTokenizer> tokenizer;
  std::optional<tok::ChatFormat> chat_format;
  std::string name;
};

namespace {

bool has_tokenizer_files(const std::string& path) {
  return path.ends_with(".gguf") || tok::tokenizer_file(path).has_value();
}

std::string name_of(const std::string& path) {
  const std::filesystem::path p = std::filesystem::path(path).lexically_normal();
  std::string n = p.filename().string();
  return n.empty() ? p.parent_path().filename().string() : n;
}

Event event_of(const sched::RequestEvent& e) {
  Event out;
  out.text = e.text;
  out.token_ids = e.token_ids;
  out.finished = e.finish != sched::FinishReason::kNone;
  out.finish_reason = std::string(sched::finish_reason_name(e.finish));
  out.error = e.error;
  out.prompt_tokens = e.usage.prompt_tokens;
  out.completion_tokens = e.usage.completion_tokens;
  return out;
}

}  // namespace

Model::Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Model::~Model() = default;

Result<std::unique_ptr<Model>> Model::load(const std::string& path, const ModelOptions& options) {
  MLA_ASSIGN_OR_RETURN(KvCacheDtype kv, parse_kv_cache_dtype(options.kv_dtype));
  RuntimeOptions ro;
  ro.kv_dtype = kv;
  ro.matmul_dtype = options.bf16_products ? DType::kBF16 : DType::kF32;
  ro.max_context = options.max_context;
  ro.prefill_absorption_threshold = tuned_prefill_absorption_threshold(ro.attention_q_dtype)
                                        .value_or(kDefaultPrefillAbsorptionThreshold);
  auto impl = std::make_unique<Impl>();
  MLA_ASSIGN_OR_RETURN(impl->model, mla::Model::load(path, ro));
  if (has_tokenizer_files(path)) {
    MLA_ASSIGN_OR_RETURN(tok::LoadedTokenizer t, tok::load_tokenizer_dir(path));
    impl->tokenizer.emplace(std::move(t));
    if (Result<tok::ChatFormat> f = tok::detect_chat_format(impl->tokenizer->config.chat_template);
        f.ok())
      impl->chat_format = *f;
  }
  impl->name = name_of(path);
  return std::unique_ptr<Model>(new Model(std::move(impl)));
}

const std::string& Model::name() const {
  return impl_->name;
}
int64_t Model::vocab_size() const {
  return impl_->model->config().vocab_size;
}
int64_t Model::max_context() const {
  return impl_->model->max_context();
}
bool Model::has_tokenizer() const {
  return impl_->tokenizer.has_value();
}
bool Model::has_chat_format() const {
  return impl_->chat_format.has_value();
}

namespace {

Result<std::vector<int32_t>> tokenize_text(const Model::Impl& m, const std::string& text) {
  if (!m.tokenizer)
    return invalid_argument(fmt::format("{} has no tokenizer: submit token ids", m.name));
  tok::EncodeOptions eo;
  eo.add_bos = m.tokenizer->adds_bos();
  return m.tokenizer->tokenizer.encode(text, eo);
}

}  // namespace

Result<std::vector<int32_t>> Model::tokenize(const std::string& text) const {
  return tokenize_text(*impl_, text);
}

Result<std::string> Model::detokenize(std::span<const int32_t> ids) const {
  if (!impl_->tokenizer) return invalid_argument(fmt::format("{} has no tokenizer", impl_->name));
  return impl_->tokenizer->tokenizer.decode(ids, tok::DecodeOptions{.skip_special = true});
}

struct Stream::Impl {
  std::shared_ptr<sched::RequestStream> stream;
  bool done = false;
};

Stream::Stream(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
// A stream dropped before its last event cancels its request (its pages are freed).
Stream::~Stream() {
  if (impl_ && !impl_->done) impl_->stream->cancel();
}
uint64_t Stream::id() const {
  return impl_->stream->id();
}
void Stream::cancel() {
  impl_->stream->cancel();
}

std::optional<Event> Stream::next() {
  if (impl_->done) return std::nullopt;
  std::optional<sched::RequestEvent> e = impl_->stream->next();
  if (!e) {
    impl_->done = true;
    return std::nullopt;
  }
  Event out = event_of(*e);
  impl_->done = out.finished;
  return out;
}

struct Engine::Impl {
  Model::Impl* model = nullptr;
  std::unique_ptr<ThreadPool> own_pool;  // options.threads > 0
  std::unique_ptr<sched::Engine> engine;

  Result<std::unique_ptr<Stream>> submit(std::vector<int32_t> ids, const SamplingOptions& s) {
    sched::Request r;
    r.prompt = std::move(ids);
    r.max_tokens = s.max_tokens;
    r.stop = s.stop;
    r.ignore_eos = s.ignore_eos;
    r.sampling.temperature = s.temperature;
    r.sampling.top_k = s.top_k;
    r.sampling.top_p = s.top_p;
    r.sampling.min_p = s.min_p;
    r.sampling.presence_penalty = s.presence_penalty;
    r.sampling.frequency_penalty = s.frequency_penalty;
    r.sampling.repetition_penalty = s.repetition_penalty;
    // No seed: a fresh one per request, as the server does (else equal prompts would draw equal
    // "random" replies).
    r.sampling.seed =
        s.seed ? *s.seed : (uint64_t(std::random_device{}()) << 32 | std::random_device{}());
    MLA_ASSIGN_OR_RETURN(std::shared_ptr<sched::RequestStream> st, engine->submit(std::move(r)));
    auto impl = std::make_unique<Stream::Impl>();
    impl->stream = std::move(st);
    return std::make_unique<Stream>(std::move(impl));
  }
};

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

Result<std::unique_ptr<Engine>> Engine::create(Model& model, const EngineOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->model = model.impl_.get();
  if (options.threads < 0)
    return invalid_argument(fmt::format("threads {}: 0 (default) or more", options.threads));
  if (options.threads > 0) impl->own_pool = std::make_unique<ThreadPool>(options.threads);
  sched::EngineOptions eo;
  eo.scheduler.max_num_seqs = options.max_num_seqs;
  if (options.max_num_batched_tokens > 0)
    eo.scheduler.max_num_batched_tokens = options.max_num_batched_tokens;
  eo.page_size = options.page_size;
  eo.kv_cache_bytes = options.kv_cache_bytes;
  const tok::Tokenizer* tk = model.impl_->tokenizer ? &model.impl_->tokenizer->tokenizer : nullptr;
  MLA_ASSIGN_OR_RETURN(impl->engine,
                       sched::Engine::create(*model.impl_->model, eo, tk, impl->own_pool.get()));
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

Result<std::unique_ptr<Stream>> Engine::submit(const std::string& prompt,
                                               const SamplingOptions& s) {
  MLA_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tokenize_text(*impl_->model, prompt));
  return impl_->submit(std::move(ids), s);
}

Result<std::unique_ptr<Stream>> Engine::submit(std::vector<int32_t> prompt_ids,
                                               const SamplingOptions& s) {
  return impl_->submit(std::move(prompt_ids), s);
}

Result<std::unique_ptr<Stream>> Engine::submit_chat(const std::vector<Message>& messages,
                                                    const SamplingOptions& s) {
  const Model::Impl& m = *impl_->model;
  if (!m.tokenizer || !m.chat_format)
    return invalid_argument(
        fmt::format("{} has no chat template: submit a text or token prompt", m.name));
  std::vector<tok::ChatMessage> msgs;
  for (const Message& x : messages) {
    tok::ChatMessage c;
    c.role = x.role;
    c.content = x.content;
    msgs.push_back(std::move(c));
  }
  MLA_ASSIGN_OR_RETURN(std::vector<tok::ChatPart> parts, tok::render_chat(*m.chat_format, msgs));
  MLA_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tok::encode_chat(m.tokenizer->tokenizer, parts));
  return impl_->submit(std::move(ids), s);
}

void Engine::cancel(uint64_t id) {
  impl_->engine->cancel(id);
}

EngineStatus Engine::status() const {
  const sched::EngineMetrics m = impl_->engine->metrics();
  EngineStatus s;
  s.running = m.num_requests_running;
  s.waiting = m.num_requests_waiting;
  s.kv_pages_used = impl_->engine->cache_stats().pages_used;
  s.kv_pages_total = impl_->engine->num_blocks();
  for (int64_t n : m.request_success) s.requests_finished += n;
  s.generated_tokens = m.generation_tokens;
  return s;
}

}  // namespace mla::api
