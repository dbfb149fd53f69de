// Long inputs: 1 MiB of one repeated character (the case that overflows the stack of recursive
// regex engines) encodes in well under a second with no stack growth, and decodes back exactly.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "tokenizer_test_util.h"

namespace mla::tok {
namespace {

// A guard against work that grows faster than the input (one MiB of one repeated character is
// the classic quadratic case: minutes, not seconds), not a speed target: the encode rate is
// measured by bench/tokenizer_bench (docs/BENCHMARKS.md, "Tokenizer"). A release build takes
// ~0.1–0.5 s here; the bound leaves room for a machine busy with other builds and tests.
#if defined(MLA_SANITIZE_BUILD) || !defined(NDEBUG)
constexpr double kSecondsPerMiB = 20.0;  // sanitizers and -O0 are many times slower
#else
constexpr double kSecondsPerMiB = 10.0;
#endif

std::string repeat_to_mib(const std::string& unit) {
  std::string s;
  while (s.size() + unit.size() <= (1u << 20)) s += unit;
  return s;
}

class LongInput : public ::testing::TestWithParam<std::string> {};

TEST_P(LongInput, OneMiBOfOneCharacter) {
  MLA_NEED_V3(t);
  const std::string text = repeat_to_mib(GetParam());
  for (bool special : {false, true}) {
    EncodeOptions o;
    o.parse_special = special;
    const auto start = std::chrono::steady_clock::now();
    Result<std::vector<int32_t>> ids = t->encode(text, o);
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ASSERT_TRUE(ids.ok()) << ids.status().to_string();
    EXPECT_LT(s, kSecondsPerMiB) << ids->size() << " ids";
    Result<std::string> back = t->decode(*ids);
    ASSERT_TRUE(back.ok());
    EXPECT_TRUE(*back == text);
  }
}

INSTANTIATE_TEST_SUITE_P(Chars, LongInput,
                         ::testing::Values("a", " ", "\n", "\t", "1", "中", "!", "é", "\r\n", "😀",
                                           "\u00a0", "<", "<｜User｜>", "e\u0301", "ab "));

TEST(LongInputDigits, RunsSplitIntoThrees) {
  MLA_NEED_V3(t);
  const std::string text(300001, '7');
  Result<std::vector<int32_t>> ids = t->encode(text);
  ASSERT_TRUE(ids.ok());
  Result<std::vector<int32_t>> three = t->encode("777");
  Result<std::vector<int32_t>> two = t->encode("77");
  ASSERT_TRUE(three.ok() && two.ok());
  ASSERT_EQ(three->size(), 1u);
  ASSERT_EQ(ids->size(), 100001u);  // 100,000 × "777", then "7"
  for (size_t i = 0; i + 1 < ids->size(); ++i) ASSERT_EQ((*ids)[i], (*three)[0]) << i;
}

}  // namespace
}  // namespace mla::tok
