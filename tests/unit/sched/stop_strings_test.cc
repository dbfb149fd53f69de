// StopStringFilter: text is cut before the first stop string, however the pieces split it, and
// nothing that could still start one is released early.
#include "sched/stop_strings.h"

#include <gtest/gtest.h>

namespace mla::sched {
namespace {

// Pushes `pieces` until a stop; returns (text out, stopped).
std::pair<std::string, bool> run(StopStringFilter f, const std::vector<std::string>& pieces) {
  std::string out;
  for (const std::string& p : pieces) {
    bool stopped = false;
    out += f.push(p, &stopped);
    if (stopped) return {out, true};
  }
  return {out + f.flush(), false};
}

TEST(StopStrings, NoStopsPassesEverythingThrough) {
  StopStringFilter f;
  bool stopped = true;
  EXPECT_EQ(f.push("abc", &stopped), "abc");
  EXPECT_FALSE(stopped);
  EXPECT_EQ(f.flush(), "");
}

TEST(StopStrings, CutsBeforeTheStopAcrossEverySplit) {
  const std::string text = "Hello, World!\nUser: more";
  for (size_t a = 0; a <= text.size(); ++a)
    for (size_t b = a; b <= text.size(); ++b) {
      auto [out, stopped] = run(StopStringFilter({"\nUser:"}),
                                {text.substr(0, a), text.substr(a, b - a), text.substr(b)});
      EXPECT_TRUE(stopped) << a << "," << b;
      EXPECT_EQ(out, "Hello, World!") << a << "," << b;
    }
}

TEST(StopStrings, HoldsBackOnlyAPossibleStart) {
  StopStringFilter f({"END"});
  bool stopped = false;
  EXPECT_EQ(f.push("abcE", &stopped), "abc");  // "E" may begin "END"
  EXPECT_EQ(f.push("N", &stopped), "");
  EXPECT_EQ(f.push("x", &stopped), "ENx");  // it did not
  EXPECT_FALSE(stopped);
  EXPECT_EQ(f.push("EN", &stopped), "");
  EXPECT_EQ(f.flush(), "EN");  // generation ended for another reason
}

TEST(StopStrings, EarliestOfSeveralWins) {
  auto [out, stopped] = run(StopStringFilter({"world", "lo w", "zzz"}), {"hel", "lo world"});
  EXPECT_TRUE(stopped);
  EXPECT_EQ(out, "hel");
}

TEST(StopStrings, StopAtTheVeryStartAndMultibyteText) {
  auto [out, stopped] = run(StopStringFilter({"é"}), {"é", "x"});
  EXPECT_TRUE(stopped);
  EXPECT_EQ(out, "");
  // "€" (E2 82 AC) and "é" (C3 A9) share no prefix, so the euro sign is released whole.
  StopStringFilter f({"é!"});
  bool s = false;
  EXPECT_EQ(f.push("a€", &s), "a€");
  EXPECT_EQ(f.push("é", &s), "");
  EXPECT_EQ(f.push("?", &s), "é?");
}

// include_stop_str_in_output: the first stop string stays, nothing after it; of two starting at
// one place, the shorter (it was whole first).
TEST(StopStrings, IncludeTheStopString) {
  auto [out, stopped] = run(StopStringFilter({"world", "lo w"}, true), {"hel", "lo world!"});
  EXPECT_TRUE(stopped);
  EXPECT_EQ(out, "hello w");
  auto [out2, stopped2] = run(StopStringFilter({"abc", "ab"}, true), {"xa", "bcd"});
  EXPECT_TRUE(stopped2);
  EXPECT_EQ(out2, "xab");
}

}  // namespace
}  // namespace mla::sched
