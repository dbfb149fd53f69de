// The engine on the tiny V3 model: greedy output alone / batched / preempted against generate(),
// prefix-cache hits against misses, pinned prefixes under pressure, stop conditions, refusals,
// the callback form, metrics. Concurrency with random arrivals is engine_property_test.cc.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>

#include "engine_test_util.h"

namespace mla::sched {
namespace {

using test_util::expect_greedy_match;
using test_util::make_prompt;
using test_util::reference_greedy;
using test_util::tiny_model;

class EngineTest : public ::testing::Test {
 protected:
  std::unique_ptr<Engine> start(EngineOptions o, const tok::Tokenizer* t = nullptr) {
    if (o.num_blocks == 0) o.num_blocks = 64;
    if (o.page_size == kDefaultPageSize) o.page_size = 16;
    auto e = Engine::create(tiny_model(), o, t, &pool_);
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    return e.ok() ? std::move(*e) : nullptr;
  }
  static Request greedy(std::vector<int32_t> prompt, int n) {
    Request r;
    r.prompt = std::move(prompt);
    r.max_tokens = n;
    r.ignore_eos = true;
    return r;
  }
  static RequestOutput run(Engine& e, Request r) {
    auto s = e.submit(std::move(r));
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    return s.ok() ? (*s)->collect() : RequestOutput{};
  }
  ThreadPool pool_{test_util::kThreads};
  const int64_t V = tiny_model().config().vocab_size;
};

TEST_F(EngineTest, GreedyAloneMatchesGenerate) {
  const std::vector<int32_t> p = make_prompt(37, 1);
  const test_util::Reference ref = reference_greedy(tiny_model(), p, 12);
  auto e = start({});
  RequestOutput out = run(*e, greedy(p, 12));
  EXPECT_EQ(out.finish, FinishReason::kLength);
  EXPECT_EQ(out.usage.prompt_tokens, 37);
  EXPECT_EQ(out.usage.completion_tokens, 12);
  expect_greedy_match(out.token_ids, ref, V, "alone");
}

// Many requests at once through a small budget: chunked prefills mixed with batched decodes.
TEST_F(EngineTest, GreedyBatchedAndPreemptedMatchAlone) {
  const int n = 8, new_tokens = 20;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<test_util::Reference> refs;
  for (int i = 0; i < n; ++i) {
    prompts.push_back(make_prompt(5 + 9 * i, 10 + i));
    refs.push_back(reference_greedy(tiny_model(), prompts.back(), new_tokens));
  }
  for (int32_t blocks : {64, 9}) {  // 9 pages of 16 rows cannot hold 8 requests: preemption
    EngineOptions o;
    o.num_blocks = blocks;
    o.scheduler.max_num_batched_tokens = 24;
    auto e = start(o);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int i = 0; i < n; ++i)
      streams.push_back(*e->submit(greedy(prompts[size_t(i)], new_tokens)));
    int ties = 0, preempted = 0;
    for (int i = 0; i < n; ++i) {
      RequestOutput out = streams[size_t(i)]->collect();
      ASSERT_EQ(out.finish, FinishReason::kLength);
      preempted += out.usage.num_preemptions > 0;
      ties +=
          expect_greedy_match(out.token_ids, refs[size_t(i)], V,
                              "blocks " + std::to_string(blocks) + " request " + std::to_string(i));
    }
    const EngineMetrics m = e->metrics();
    if (blocks == 9) {
      EXPECT_GT(m.num_preemptions, 0);
      EXPECT_GT(preempted, 0);
    }
    EXPECT_GT(m.absorbed_chunks, 0);
    EXPECT_GT(m.decompressed_chunks, 0);
    EXPECT_GT(m.decode_tokens, 0);
    EXPECT_LE(ties, 1) << "near-ties should be rare on random weights";
    std::printf("%d pages: %d of %d requests preempted, %d near-ties\n", blocks, preempted, n,
                ties);
    e->wait_idle();
    EXPECT_EQ(e->cache_stats().pages_used, 0);
  }
}

TEST_F(EngineTest, PrefixCacheHitGivesTheSameOutputAsAMiss) {
  const std::vector<int32_t> p = make_prompt(70, 3);
  auto e = start({});
  RequestOutput miss = run(*e, greedy(p, 10));
  EXPECT_EQ(miss.usage.cached_tokens, 0);
  RequestOutput hit = run(*e, greedy(p, 10));
  EXPECT_EQ(hit.usage.cached_tokens, 64);  // 4 full pages of 16; the 5th holds the last token
  EXPECT_EQ(hit.token_ids, miss.token_ids);
  // A longer prompt sharing the first 70 tokens reuses the same pages.
  std::vector<int32_t> longer = p;
  longer.insert(longer.end(), {5, 6, 7});
  const test_util::Reference ref = reference_greedy(tiny_model(), longer, 10);
  RequestOutput ext = run(*e, greedy(longer, 10));
  EXPECT_EQ(ext.usage.cached_tokens, 64);
  expect_greedy_match(ext.token_ids, ref, V, "extended prompt");
  const EngineMetrics m = e->metrics();
  EXPECT_EQ(m.prefix_cache_queries, 70 + 70 + 73);
  EXPECT_EQ(m.prefix_cache_hits, 128);
}

TEST_F(EngineTest, PinnedPrefixSurvivesPressureUntilUnpinned) {
  EngineOptions o;
  o.num_blocks = 12;
  auto e = start(o);
  const std::vector<int32_t> system = make_prompt(32, 4);  // two pages
  Result<PrefixId> pin = e->pin_prefix(system);
  ASSERT_TRUE(pin.ok()) << pin.status().to_string();
  EXPECT_EQ(e->metrics().num_pinned_prefixes, 1);
  EXPECT_EQ(e->cache_stats().pages_used, 2);
  auto churn = [&](int salt) {  // distinct prompts that cycle every page through the pool
    for (int i = 0; i < 6; ++i) run(*e, greedy(make_prompt(60, salt + i), 4));
  };
  churn(100);
  std::vector<int32_t> q = system;
  q.insert(q.end(), {9, 8, 7});
  EXPECT_EQ(run(*e, greedy(q, 3)).usage.cached_tokens, 32);
  // 174 tokens need 11 pages: too many beside the pin, but fine in the pool.
  RequestOutput big = run(*e, greedy(make_prompt(170, 7), 4));
  EXPECT_EQ(big.finish, FinishReason::kError);
  EXPECT_NE(big.error.find("pinned"), std::string::npos) << big.error;
  ASSERT_TRUE(e->unpin_prefix(*pin).ok());
  EXPECT_EQ(e->unpin_prefix(*pin).code(), StatusCode::kNotFound);
  EXPECT_EQ(run(*e, greedy(make_prompt(170, 7), 4)).finish, FinishReason::kLength);
  churn(200);
  EXPECT_EQ(run(*e, greedy(q, 3)).usage.cached_tokens, 0);  // evicted once unpinned
  EXPECT_EQ(e->pin_prefix(make_prompt(8, 1)).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(EngineTest, APinJobWhoseForwardFailsReportsThatError) {
  // The forward pass of the pin job fails (injected): pin_prefix returns that error and its code,
  // not resource_exhausted, which means "does not fit"; the engine serves on, nothing held.
  EngineOptions o;
  o.num_blocks = 12;
  std::atomic<bool> fail{true};
  o.before_forward = [&](const StepPlan&) {
    return fail.load() ? Status(StatusCode::kIoError, "injected forward failure") : Status();
  };
  auto e = start(o);
  Result<PrefixId> pin = e->pin_prefix(make_prompt(32, 4));
  ASSERT_FALSE(pin.ok());
  EXPECT_EQ(pin.status().code(), StatusCode::kIoError) << pin.status().to_string();
  EXPECT_NE(pin.status().message().find("injected forward failure"), std::string::npos);
  EXPECT_EQ(e->metrics().num_pinned_prefixes, 0);
  EXPECT_EQ(e->cache_stats().pages_used, 0);
  fail = false;
  EXPECT_TRUE(e->pin_prefix(make_prompt(32, 4)).ok());
  EXPECT_EQ(run(*e, greedy(make_prompt(20, 5), 4)).finish, FinishReason::kLength);
}

TEST_F(EngineTest, CancelWhileWaitingOrRunningFreesTheBlocks) {
  EngineOptions o;
  o.scheduler.max_num_seqs = 1;  // the second request waits behind the first
  auto e = start(o);
  std::atomic<int> events{0};
  std::atomic<RequestId> first{0};  // known once submit returns, maybe after a few events
  auto s1 = e->submit(greedy(make_prompt(20, 5), 900), [&](const RequestEvent&) {
    if (++events >= 3 && first.load() != 0) e->cancel(first.load());  // from the engine thread
  });
  ASSERT_TRUE(s1.ok());
  first = (*s1)->id();
  std::shared_ptr<RequestStream> running = *s1;
  auto s2 = e->submit(greedy(make_prompt(20, 6), 5));
  ASSERT_TRUE(s2.ok());
  (*s2)->cancel();
  RequestOutput o1 = running->collect(), o2 = (*s2)->collect();
  EXPECT_EQ(o1.finish, FinishReason::kCancelled);
  EXPECT_LT(o1.token_ids.size(), 900u);
  EXPECT_EQ(o2.finish, FinishReason::kCancelled);
  e->wait_idle();
  EXPECT_EQ(e->cache_stats().pages_used, 0);
  EXPECT_EQ(e->metrics().request_success[2], 2);
  e->cancel(12345);  // unknown ids are ignored
}

TEST_F(EngineTest, StopTokenIdsMaxTokensAndStopStrings) {
  const tok::Tokenizer t = test_util::byte_tokenizer();
  auto e = start({}, &t);
  const std::vector<int32_t> p = make_prompt(9, 8);
  RequestOutput full = run(*e, greedy(p, 24));
  ASSERT_EQ(full.token_ids.size(), 24u);
  EXPECT_EQ(full.finish, FinishReason::kLength);

  Request r = greedy(p, 24);
  r.stop_token_ids = {full.token_ids[5]};
  RequestOutput st = run(*e, r);
  EXPECT_EQ(st.finish, FinishReason::kStop);
  const auto first = std::find(full.token_ids.begin(), full.token_ids.end(), full.token_ids[5]);
  EXPECT_EQ(st.token_ids, std::vector<int32_t>(full.token_ids.begin(), first + 1));

  // A stop string: the last character of the full text. The output stops before its first
  // occurrence, whatever tokens it straddles.
  ASSERT_FALSE(full.text.empty());
  size_t lead = full.text.size() - 1;
  while (lead > 0 && (uint8_t(full.text[lead]) & 0xC0) == 0x80) --lead;
  r = greedy(p, 24);
  r.stop = {full.text.substr(lead)};
  RequestOutput ss = run(*e, r);
  EXPECT_EQ(ss.finish, FinishReason::kStop);
  EXPECT_EQ(ss.text, full.text.substr(0, full.text.find(r.stop[0])));
}

TEST_F(EngineTest, RefusesWhatCanNeverRun) {
  EngineOptions o;
  o.num_blocks = 4;  // 64 rows
  auto e = start(o);
  auto code = [&](Request r) { return e->submit(std::move(r)).status(); };
  EXPECT_EQ(code(greedy({}, 4)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(greedy({1, int32_t(V)}, 4)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(greedy({1, 2}, 0)).code(), StatusCode::kInvalidArgument);
  Status pool = code(greedy(make_prompt(60, 1), 5));
  EXPECT_EQ(pool.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(pool.message().find("4 pages"), std::string::npos) << pool.message();
  Status ctx = code(greedy(make_prompt(10, 1), 5000));
  EXPECT_NE(ctx.message().find("maximum context length is 4096"), std::string::npos)
      << ctx.message();
  Request s = greedy({1, 2}, 4);
  s.stop = {"x"};
  EXPECT_NE(code(s).message().find("tokenizer"), std::string::npos);
  Request bad = greedy({1, 2}, 4);
  bad.sampling.top_p = 0;
  EXPECT_EQ(code(bad).code(), StatusCode::kInvalidArgument);
}

TEST_F(EngineTest, CallbackEventsAndMetrics) {
  auto e = start({});
  std::vector<RequestEvent> seen;  // written on the engine thread, read after collect()
  auto s =
      e->submit(greedy(make_prompt(12, 9), 6), [&](const RequestEvent& ev) { seen.push_back(ev); });
  ASSERT_TRUE(s.ok());
  RequestOutput out = (*s)->collect();
  EXPECT_FALSE((*s)->next().has_value());  // callback streams do not queue
  ASSERT_EQ(seen.size(), 6u);
  for (size_t i = 0; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i].token_ids.size(), 1u);
    EXPECT_EQ(seen[i].finish, i + 1 < seen.size() ? FinishReason::kNone : FinishReason::kLength);
    EXPECT_EQ(seen[i].usage.completion_tokens, int64_t(i + 1));
  }
  EXPECT_EQ(out.token_ids.size(), 6u);
  const EngineMetrics m = e->metrics();
  EXPECT_EQ(m.prompt_tokens, 12);
  EXPECT_EQ(m.generation_tokens, 6);
  EXPECT_EQ(m.request_success[1], 1);
  EXPECT_EQ(m.time_to_first_token.count(), 1u);
  EXPECT_EQ(m.inter_token_latency.count(), 5u);
  EXPECT_EQ(m.e2e_request_latency.count(), 1u);
  EXPECT_EQ(m.request_queue_time.count(), 1u);
  // The finished request's tokens (12 prompt, 6 generated) and its three phase times.
  EXPECT_EQ(m.request_prompt_tokens.count(), 1u);
  EXPECT_EQ(m.request_prompt_tokens.sum(), 12.0);
  EXPECT_EQ(m.request_generation_tokens.sum(), 6.0);
  EXPECT_EQ(m.request_prefill_time.count(), 1u);
  EXPECT_EQ(m.request_decode_time.count(), 1u);
  EXPECT_EQ(m.request_inference_time.count(), 1u);
  EXPECT_GE(m.request_inference_time.sum(), m.request_decode_time.sum());
  EXPECT_GE(m.request_prefill_time.sum(), 0.0);
  EXPECT_EQ(m.steps, 6);  // one prefill step (it samples the first token), five decodes
  EXPECT_EQ(m.num_requests_running, 0);
  EXPECT_EQ(m.absorbed_chunks + m.decompressed_chunks, 1);
  const std::string text = render_prometheus(m, "tiny");
  EXPECT_NE(text.find("vllm:generation_tokens_total{model_name=\"tiny\"} 6"), std::string::npos);
}

}  // namespace
}  // namespace mla::sched
