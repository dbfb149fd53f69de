// Generating text through the public API alone (include/mla/engine.h, linked with mla_api):
// load a model, start an engine, stream a completion, then ask a chat question and stop the
// reply after a few pieces with cancel().
//
//   mla_example_generate MODEL_DIR_OR_GGUF ["prompt"]
#include <mla/engine.h>

#include <cstdio>
#include <string>

namespace {

int fail(const mla::Status& s) {
  std::fprintf(stderr, "error: %s\n", s.to_string().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL [PROMPT]\n", argv[0]);
    return 2;
  }
  const std::string prompt = argc > 2 ? argv[2] : "And God said unto Moses,";

  auto model = mla::api::Model::load(argv[1]);
  if (!model.ok()) return fail(model.status());
  mla::api::EngineOptions eo;
  eo.max_num_seqs = 4;
  eo.kv_cache_bytes = uint64_t(64) << 20;
  auto engine = mla::api::Engine::create(**model, eo);
  if (!engine.ok()) return fail(engine.status());

  // 1. A completion, streamed piece by piece.
  mla::api::SamplingOptions s;
  s.max_tokens = 48;
  s.temperature = 0.7f;
  s.top_p = 0.9f;
  s.seed = 1;
  auto stream = (*engine)->submit(prompt, s);
  if (!stream.ok()) return fail(stream.status());
  std::printf("%s", prompt.c_str());
  std::string finish;
  while (auto e = (*stream)->next()) {
    std::printf("%s", e->text.c_str());
    std::fflush(stdout);
    if (e->finished)
      finish = e->finish_reason + ", " + std::to_string(e->completion_tokens) + " tokens";
  }
  std::printf("\n[completion: %s]\n", finish.c_str());

  // 2. A chat turn in the model's own chat format, cancelled after its third piece.
  if ((*model)->has_chat_format()) {
    s.max_tokens = 64;
    auto chat =
        (*engine)->submit_chat({{"user", "Who shall ascend into the hill of the LORD?"}}, s);
    if (!chat.ok()) return fail(chat.status());
    int pieces = 0;
    while (auto e = (*chat)->next()) {
      std::printf("%s", e->text.c_str());
      if (++pieces == 3) (*chat)->cancel();
      if (e->finished) finish = e->finish_reason;
    }
    std::printf("\n[chat: %s after %d pieces]\n", finish.c_str(), pieces);
  }

  // 3. What the engine holds now.
  const mla::api::EngineStatus st = (*engine)->status();
  std::printf("[engine: %lld finished, %lld tokens generated, %lld of %lld KV pages in use]\n",
              static_cast<long long>(st.requests_finished),
              static_cast<long long>(st.generated_tokens), static_cast<long long>(st.kv_pages_used),
              static_cast<long long>(st.kv_pages_total));
  return 0;
}
