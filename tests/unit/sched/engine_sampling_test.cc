// Sampling options through the engine, batched: frequency / presence penalties against the
// formula applied to the logprobs the engine reports (the model's own distribution, before any
// penalty: a penalty that only shifts logits by a per-token amount picks the same argmax from
// logprobs as from logits), and min_tokens holding back the stop ids.
#include <gtest/gtest.h>

#include <map>

#include "engine_test_util.h"

namespace mla::sched {
namespace {

using test_util::make_prompt;
using test_util::tiny_model;

std::unique_ptr<Engine> start(ThreadPool& pool) {
  EngineOptions o;
  o.num_blocks = 64;
  o.page_size = 16;
  auto e = Engine::create(tiny_model(), o, nullptr, &pool);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  return e.ok() ? std::move(*e) : nullptr;
}

TEST(EngineSampling, PenalisedGreedyPicksTheArgmaxOfThePenalisedLogprobs) {
  ThreadPool pool(test_util::kThreads);
  auto e = start(pool);
  const float freq = 1.5f, presence = 0.5f;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 4; ++i) {  // submitted together: decoded in one batch
    Request r;
    r.prompt = make_prompt(9 + 5 * i, 30 + i);
    r.max_tokens = 24;
    r.ignore_eos = true;
    r.logprobs = kMaxTopLogprobs;
    r.sampling.frequency_penalty = freq;
    r.sampling.presence_penalty = presence;
    streams.push_back(*e->submit(std::move(r)));
  }
  int mattered = 0;
  for (auto& s : streams) {
    const RequestOutput out = s->collect();
    ASSERT_EQ(out.token_ids.size(), 24u);
    std::map<int32_t, int> count;
    for (size_t t = 0; t < out.token_ids.size(); ++t) {
      const TokenLogprobs& lp = out.logprobs[t];
      int32_t best = -1, raw_best = lp.top.front().first;
      double best_v = 0;
      for (const auto& [id, logprob] : lp.top) {  // the 20 most likely, most likely first
        const auto c = count.find(id);
        const double v = logprob - (c == count.end() ? 0.0 : c->second * freq + presence);
        if (best < 0 || v > best_v) best = id, best_v = v;
      }
      EXPECT_EQ(out.token_ids[t], best) << "step " << t;
      mattered += best != raw_best;
      ++count[out.token_ids[t]];
    }
  }
  EXPECT_GT(mattered, 0) << "the penalties never changed a choice: the test checks nothing";
}

TEST(EngineSampling, MinTokensHoldsBackTheStopIds) {
  ThreadPool pool(test_util::kThreads);
  auto e = start(pool);
  const std::vector<int32_t> prompt = make_prompt(21, 5);
  Request first;
  first.prompt = prompt;
  first.max_tokens = 1;
  first.ignore_eos = true;
  const int32_t f = (*e->submit(first))->collect().token_ids.at(0);

  Request stop = first;  // the first greedy token is a stop id: the reply ends at once
  stop.max_tokens = 10;
  stop.stop_token_ids = {f};
  const RequestOutput a = (*e->submit(stop))->collect();
  EXPECT_EQ(a.finish, FinishReason::kStop);
  EXPECT_EQ(a.token_ids, std::vector<int32_t>{f});

  Request held = stop;  // ... unless min_tokens holds it back
  held.sampling.min_tokens = 4;
  const RequestOutput b = (*e->submit(held))->collect();
  ASSERT_GE(b.token_ids.size(), 5u);
  for (size_t t = 0; t < 4; ++t) EXPECT_NE(b.token_ids[t], f) << "step " << t;
  EXPECT_TRUE(b.finish == FinishReason::kLength || b.token_ids.back() == f);
}

}  // namespace
}  // namespace mla::sched
