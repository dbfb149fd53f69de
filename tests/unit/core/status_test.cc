// Tests of mla::Status, mla::Result<T>, the propagation macros and the MLA_CHECK abort path.
#include "mla/status.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <utility>

#include "core/aligned_buffer.h"
#include "core/check.h"

namespace mla {
namespace {

TEST(Status, DefaultIsOk) {
  const Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_EQ(s.message(), "");
  EXPECT_EQ(s.to_string(), "ok");
  EXPECT_TRUE(Status::ok_status().ok());
}

TEST(Status, HelpersSetCodeMessageAndString) {
  const struct {
    Status s;
    StatusCode code;
    const char* name;
  } kCases[] = {
      {invalid_argument("m0"), StatusCode::kInvalidArgument, "invalid_argument"},
      {not_found("m1"), StatusCode::kNotFound, "not_found"},
      {data_loss("m2"), StatusCode::kDataLoss, "data_loss"},
      {io_error("m3"), StatusCode::kIoError, "io_error"},
      {out_of_memory("m4"), StatusCode::kOutOfMemory, "out_of_memory"},
      {unimplemented("m5"), StatusCode::kUnimplemented, "unimplemented"},
      {Status(StatusCode::kResourceExhausted, "m6"), StatusCode::kResourceExhausted,
       "resource_exhausted"},
  };
  int i = 0;
  for (const auto& c : kCases) {
    const std::string msg = "m" + std::to_string(i++);
    EXPECT_FALSE(c.s.ok()) << c.name;
    EXPECT_EQ(c.s.code(), c.code) << c.name;
    EXPECT_EQ(c.s.message(), msg);
    EXPECT_STREQ(status_code_name(c.code), c.name);
    EXPECT_EQ(c.s.to_string(), std::string(c.name) + ": " + msg);
  }
}

TEST(Status, CodeNamesAreDistinct) {
  std::set<std::string> names;
  for (int c = int(StatusCode::kOk); c <= int(StatusCode::kResourceExhausted); ++c)
    names.insert(status_code_name(StatusCode(c)));
  EXPECT_EQ(names.size(), size_t(StatusCode::kResourceExhausted) + 1);
  EXPECT_STREQ(status_code_name(StatusCode::kOk), "ok");
  EXPECT_STREQ(status_code_name(StatusCode(99)), "unknown");
}

TEST(Result, HoldsValue) {
  Result<int> r(42);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r.status().ok());
  EXPECT_EQ(r.value(), 42);
  EXPECT_EQ(*r, 42);
  *r = 7;
  EXPECT_EQ(r.value(), 7);

  const Result<std::string> s(std::string("abc"));
  EXPECT_EQ(s->size(), 3u);
  EXPECT_EQ(*s, "abc");
}

TEST(Result, HoldsError) {
  const Result<int> r = not_found("tensor 'w' in model.safetensors");
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(r.status().message(), "tensor 'w' in model.safetensors");
}

TEST(Result, HoldsMoveOnlyType) {
  AlignedBuffer<float> buf(16);
  float* const data = buf.data();
  Result<AlignedBuffer<float>> r(std::move(buf));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->data(), data);
  EXPECT_EQ(r->size(), 16u);
  // Moving the value out transfers ownership without a copy.
  AlignedBuffer<float> out = std::move(r).value();
  EXPECT_EQ(out.data(), data);
  EXPECT_EQ(out.size(), 16u);
}

Status fail_if(bool fail, int* reached) {
  if (fail) return data_loss("truncated header");
  ++*reached;
  return Status();
}

Status two_steps(bool fail_first, bool fail_second, int* reached) {
  MLA_RETURN_IF_ERROR(fail_if(fail_first, reached));
  MLA_RETURN_IF_ERROR(fail_if(fail_second, reached));
  ++*reached;
  return Status();
}

TEST(Macros, ReturnIfErrorPropagatesAndStops) {
  int reached = 0;
  EXPECT_TRUE(two_steps(false, false, &reached).ok());
  EXPECT_EQ(reached, 3);

  reached = 0;
  const Status s = two_steps(true, false, &reached);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_EQ(s.message(), "truncated header");
  EXPECT_EQ(reached, 0);

  reached = 0;
  EXPECT_EQ(two_steps(false, true, &reached).code(), StatusCode::kDataLoss);
  EXPECT_EQ(reached, 1);
}

Result<AlignedBuffer<int>> make_buffer(size_t n) {
  if (n == 0) return invalid_argument("n must be positive");
  AlignedBuffer<int> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = int(i);
  return b;
}

// Two MLA_ASSIGN_OR_RETURN in one function, of a move-only type, into a Result of another type.
Result<int> sum_two(size_t n1, size_t n2) {
  MLA_ASSIGN_OR_RETURN(auto a, make_buffer(n1));
  MLA_ASSIGN_OR_RETURN(AlignedBuffer<int> b, make_buffer(n2));
  int sum = 0;
  for (int v : a) sum += v;
  for (int v : b) sum += v;
  return sum;
}

Status assign_into_existing(size_t n, size_t* size_out) {
  AlignedBuffer<int> b;
  MLA_ASSIGN_OR_RETURN(b, make_buffer(n));
  *size_out = b.size();
  return Status();
}

TEST(Macros, AssignOrReturnPropagates) {
  const Result<int> ok = sum_two(3, 4);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, 0 + 1 + 2 + 0 + 1 + 2 + 3);

  for (auto [n1, n2] : {std::pair<size_t, size_t>{0, 4}, {3, 0}}) {
    const Result<int> bad = sum_two(n1, n2);
    EXPECT_FALSE(bad.ok());
    EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(bad.status().message(), "n must be positive");
  }

  size_t size = 0;
  EXPECT_TRUE(assign_into_existing(5, &size).ok());
  EXPECT_EQ(size, 5u);
  EXPECT_EQ(assign_into_existing(0, &size).code(), StatusCode::kInvalidArgument);
}

TEST(Check, PassingCheckEvaluatesConditionOnce) {
  int evaluations = 0;
  MLA_CHECK(++evaluations == 1, "evaluations={}", evaluations);
  EXPECT_EQ(evaluations, 1);
}

// Death tests run in a re-executed child ("threadsafe"), since other tests leave pool threads
// alive and forking a threaded process is unsafe.
TEST(CheckDeathTest, FailedCheckAbortsWithValues) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const int x = 2;
  const std::string y = "seven";
  EXPECT_DEATH(MLA_CHECK(x == 3, "x={} y={}", x, y),
               "status_test\\.cc:[0-9]+: MLA_CHECK\\(x == 3\\) failed: x=2 y=seven");
}

TEST(CheckDeathTest, DcheckFollowsBuildType) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // Release builds drop MLA_DCHECK's arguments entirely, so `blocks` is unused there.
  [[maybe_unused]] const int blocks = 5;
#if defined(NDEBUG) && !defined(MLA_SANITIZE_BUILD)
  int evaluations = 0;
  MLA_DCHECK(++evaluations < 0, "blocks={}", blocks);  // compiled out: not even evaluated
  EXPECT_EQ(evaluations, 0);
#else
  EXPECT_DEATH(MLA_DCHECK(blocks < 4, "blocks={} limit={}", blocks, 4),
               "MLA_CHECK\\(blocks < 4\\) failed: blocks=5 limit=4");
#endif
}

TEST(ResultDeathTest, OkStatusWithoutValueAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        Result<int> r{Status()};
        (void)r;
      },
      "");
  EXPECT_DEATH(
      {
        Result<std::string> r{Status::ok_status()};
        (void)r;
      },
      "");
}

}  // namespace
}  // namespace mla
