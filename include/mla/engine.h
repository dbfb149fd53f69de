// The public C++ API of mla: load a DeepSeek-family model (a Hugging Face directory or a GGUF
// file), start a serving engine on it, submit text, token or chat prompts with sampling options,
// stream the generated text, cancel, and read the engine's status. This header and
// mla/status.h are all an embedding application includes; link the `mla_api` library.
//
//   auto model = mla::api::Model::load("models/tiny-kjv");
//   auto engine = mla::api::Engine::create(**model);
//   auto stream = (*engine)->submit("And God said", {.max_tokens = 32});
//   while (auto e = (*stream)->next()) std::cout << e->text;
//
// Thread safety: Engine's methods may be called from any thread; a Stream from one thread at a
// time. A Model must outlive every Engine created on it, an Engine its Streams' use of cancel()
// (a Stream outliving its engine only reports that the engine stopped).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "mla/status.h"

namespace mla::api {

struct ModelOptions {
  std::string kv_dtype = "bf16";  // the latent cache's records: bf16, fp8_e4m3, int8, nvfp4
  // Weight products of prefill chunks on BF16 dot products (about twice the prefill rate on CPUs
  // with AVX512-BF16); false keeps every product in FP32, where a reply does not depend on
  // which other requests shared its batch.
  bool bf16_products = true;
  int64_t max_context = 0;  // tokens per sequence; 0: the model's (capped at 32,768)
};

// A loaded model: weights (kept in their file's formats: BF16, block-FP8, GGUF blocks), its
// tokenizer and chat format when the checkpoint has them.
class Model {
 public:
  // path: a directory with config.json, *.safetensors and (for text) tokenizer.json, or a .gguf
  // file (the first of a split set). Errors name the file and what was wrong with it.
  static Result<std::unique_ptr<Model>> load(const std::string& path,
                                             const ModelOptions& options = {});
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const std::string& name() const;  // the directory's or file's name
  int64_t vocab_size() const;
  int64_t max_context() const;
  bool has_tokenizer() const;
  bool has_chat_format() const;
  // Text to ids (with the model's BOS when its tokenizer config asks for one) and back.
  Result<std::vector<int32_t>> tokenize(const std::string& text) const;
  Result<std::string> detokenize(std::span<const int32_t> ids) const;

  struct Impl;

 private:
  friend class Engine;
  explicit Model(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// How tokens are chosen (vLLM's meanings; docs/SERVING.md "Sampling").
struct SamplingOptions {
  int max_tokens = 64;
  float temperature = 0.0f;  // 0: greedy
  int top_k = 0;             // 0: off
  float top_p = 1.0f;
  float min_p = 0.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  float repetition_penalty = 1.0f;
  std::optional<uint64_t> seed;   // same seed, same reply; none: a fresh seed per request
  std::vector<std::string> stop;  // the reply ends before the first of these
  bool ignore_eos = false;        // keep going past the end-of-sequence token
};

struct Message {
  std::string role;  // system, user, assistant
  std::string content;
};

// One step's news for one request. The last event has finished set.
struct Event {
  std::string text;                // new text (complete UTF-8; stop strings never appear)
  std::vector<int32_t> token_ids;  // new ids
  bool finished = false;
  std::string finish_reason;  // last event: "stop", "length", "cancelled" or "error"
  std::string error;          // finish_reason "error": why
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;  // so far
};

// One submitted request's events.
class Stream {
 public:
  ~Stream();
  uint64_t id() const;
  // Blocks until the next event; std::nullopt after the last one was returned.
  std::optional<Event> next();
  // Asks the engine to stop this request; a last event with finish_reason "cancelled" follows
  // unless it finished first. Never blocks.
  void cancel();

  struct Impl;
  explicit Stream(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

struct EngineOptions {
  int max_num_seqs = 16;           // requests decoding at once; more wait in a queue
  int max_num_batched_tokens = 0;  // tokens per step (prefill chunks + decode); 0: default
  uint64_t kv_cache_bytes = uint64_t(512) << 20;  // the paged latent cache
  int page_size = 64;                             // tokens per cache page
  int threads = 0;                                // 0: MLA_NUM_THREADS, else every hardware thread
};

struct EngineStatus {
  int64_t running = 0;  // requests decoding or prefilling
  int64_t waiting = 0;  // queued
  int64_t kv_pages_used = 0;
  int64_t kv_pages_total = 0;
  int64_t requests_finished = 0;
  int64_t generated_tokens = 0;
};

// Continuous batching over one model: chunked prefill, prefix caching, preemption under memory
// pressure. Requests run concurrently; their results do not depend on each other (beyond the
// BF16 rounding of batched products, see ModelOptions::bf16_products).
class Engine {
 public:
  static Result<std::unique_ptr<Engine>> create(Model& model, const EngineOptions& options = {});
  // Stops the engine: unfinished requests end with finish_reason "cancelled".
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Errors (invalid_argument naming the field) come at once: an empty or too long prompt, bad
  // sampling values, text without a tokenizer, chat without a chat format.
  Result<std::unique_ptr<Stream>> submit(const std::string& prompt, const SamplingOptions& s);
  Result<std::unique_ptr<Stream>> submit(std::vector<int32_t> prompt_ids, const SamplingOptions& s);
  Result<std::unique_ptr<Stream>> submit_chat(const std::vector<Message>& messages,
                                              const SamplingOptions& s);
  // Same as the stream's cancel(); unknown or finished ids are ignored.
  void cancel(uint64_t id);
  EngineStatus status() const;

  struct Impl;

 private:
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mla::api
