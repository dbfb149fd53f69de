// The public API (include/mla/engine.h) on the bundled model: what a caller gets back for good
// and bad input. Includes only the public headers, as an embedding application would.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "mla/engine.h"

namespace {

const std::string kModel = MLA_SOURCE_DIR "/models/tiny-kjv";

TEST(EngineApi, GreedyTextEqualsAcrossSubmitFormsAndStreamsToTheEnd) {
  auto model = mla::api::Model::load(kModel);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  EXPECT_EQ((*model)->name(), "tiny-kjv");
  EXPECT_TRUE((*model)->has_tokenizer());
  EXPECT_TRUE((*model)->has_chat_format());
  auto engine = mla::api::Engine::create(**model, {.kv_cache_bytes = uint64_t(16) << 20});
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();

  mla::api::SamplingOptions s;
  s.max_tokens = 12;
  s.ignore_eos = true;
  auto run = [](mla::api::Stream& st, std::vector<int32_t>* ids) {
    std::string text, finish;
    while (auto e = st.next()) {
      text += e->text;
      ids->insert(ids->end(), e->token_ids.begin(), e->token_ids.end());
      if (e->finished) finish = e->finish_reason;
    }
    EXPECT_FALSE(st.next().has_value());  // nothing after the last event
    EXPECT_EQ(finish, "length");
    return text;
  };
  auto a = (*engine)->submit("And God said", s);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  std::vector<int32_t> ids_a, ids_b;
  const std::string text_a = run(**a, &ids_a);
  EXPECT_EQ(ids_a.size(), 12u);
  // The same prompt as ids (BOS first, as tokenize adds it): the same greedy tokens and text.
  auto prompt = (*model)->tokenize("And God said");
  ASSERT_TRUE(prompt.ok());
  EXPECT_EQ(prompt->front(), 0);
  auto b = (*engine)->submit(*prompt, s);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(run(**b, &ids_b), text_a);
  EXPECT_EQ(ids_b, ids_a);
  auto text = (*model)->detokenize(ids_a);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, text_a);
  const mla::api::EngineStatus st = (*engine)->status();
  EXPECT_EQ(st.requests_finished, 2);
  EXPECT_EQ(st.generated_tokens, 24);
  EXPECT_GT(st.kv_pages_total, 0);
}

TEST(EngineApi, BadInputIsAnErrorNamingIt) {
  auto missing = mla::api::Model::load("/nonexistent/model");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/model"), std::string::npos);
  auto bad_kv = mla::api::Model::load(kModel, {.kv_dtype = "fp4"});
  ASSERT_FALSE(bad_kv.ok());
  EXPECT_NE(bad_kv.status().message().find("fp4"), std::string::npos);

  auto model = mla::api::Model::load(kModel);
  ASSERT_TRUE(model.ok());
  auto engine = mla::api::Engine::create(**model, {.kv_cache_bytes = uint64_t(16) << 20});
  ASSERT_TRUE(engine.ok());
  mla::api::SamplingOptions s;
  auto out_of_vocab = (*engine)->submit(std::vector<int32_t>{0, 4096}, s);
  ASSERT_FALSE(out_of_vocab.ok());
  EXPECT_EQ(out_of_vocab.status().code(), mla::StatusCode::kInvalidArgument);
  s.top_p = 0.0f;
  auto bad_top_p = (*engine)->submit("In the beginning", s);
  ASSERT_FALSE(bad_top_p.ok());
  EXPECT_NE(bad_top_p.status().message().find("top_p"), std::string::npos);
  s.top_p = 1.0f;
  s.max_tokens = 1 << 20;  // past the context
  EXPECT_FALSE((*engine)->submit("In the beginning", s).ok());
  // The engine still serves after every refusal.
  s.max_tokens = 4;
  auto ok = (*engine)->submit_chat({{"user", "Who is like unto thee?"}}, s);
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  int events = 0;
  while ((*ok)->next()) ++events;
  EXPECT_GE(events, 1);
}

TEST(EngineApi, CancelEndsAStreamWithCancelled) {
  auto model = mla::api::Model::load(kModel);
  ASSERT_TRUE(model.ok());
  auto engine = mla::api::Engine::create(**model, {.kv_cache_bytes = uint64_t(16) << 20});
  ASSERT_TRUE(engine.ok());
  mla::api::SamplingOptions s;
  s.max_tokens = 2000;
  s.ignore_eos = true;
  auto st = (*engine)->submit("And the LORD spake", s);
  ASSERT_TRUE(st.ok());
  std::string finish;
  int64_t generated = 0;
  while (auto e = (*st)->next()) {
    if (e->completion_tokens >= 3) (*engine)->cancel((*st)->id());
    generated = e->completion_tokens;
    if (e->finished) finish = e->finish_reason;
  }
  EXPECT_EQ(finish, "cancelled");
  EXPECT_LT(generated, 2000);
  EXPECT_EQ((*engine)->status().kv_pages_used, 0);  // its pages are free again
}

}  // namespace
