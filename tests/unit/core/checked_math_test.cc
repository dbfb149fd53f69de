// Tests of the checked size helpers (core/checked_math.h) and ByteView (core/byte_view.h): exact
// results in range, nullopt at and past every overflow edge, containment of every view.
#include "core/checked_math.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

#include "core/byte_view.h"

namespace mla {
namespace {

constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kI64Min = std::numeric_limits<int64_t>::min();
constexpr uint64_t kU64Max = std::numeric_limits<uint64_t>::max();

TEST(CheckedMath, MulExactAndOverflow) {
  EXPECT_EQ(checked_mul<int64_t>(3, 7), 21);
  EXPECT_EQ(checked_mul<int64_t>(-3, 7), -21);
  EXPECT_EQ(checked_mul<int64_t>(kI64Max, 1), kI64Max);
  EXPECT_EQ(checked_mul<int64_t>(int64_t{1} << 31, int64_t{1} << 31), int64_t{1} << 62);
  EXPECT_FALSE(checked_mul<int64_t>(int64_t{1} << 32, int64_t{1} << 31));
  EXPECT_FALSE(checked_mul<int64_t>(kI64Min, -1));
  EXPECT_EQ(checked_mul<uint64_t>(uint64_t{1} << 32, (uint64_t{1} << 32) - 1),
            kU64Max - ((uint64_t{1} << 32) - 1));
  EXPECT_FALSE(checked_mul<uint64_t>(uint64_t{1} << 32, uint64_t{1} << 32));
  EXPECT_FALSE(checked_mul<int32_t>(65536, 32768));
  EXPECT_EQ(checked_mul<int32_t>(65536, 32767), 2147418112);
}

TEST(CheckedMath, AddSubEdges) {
  EXPECT_EQ(checked_add<uint64_t>(kU64Max - 8, 8), kU64Max);
  EXPECT_FALSE(checked_add<uint64_t>(kU64Max, 1));  // the "N + 8 wraps" header length
  EXPECT_FALSE(checked_add<uint64_t>(kU64Max - 7, 8));
  EXPECT_FALSE(checked_add<int64_t>(kI64Max, 1));
  EXPECT_EQ(checked_add<int64_t>(kI64Max, -1), kI64Max - 1);
  EXPECT_EQ(checked_sub<uint64_t>(5, 5), 0u);
  EXPECT_FALSE(checked_sub<uint64_t>(4, 5));
  EXPECT_FALSE(checked_sub<int64_t>(kI64Min, 1));
}

TEST(CheckedMath, ProductRejectsOverflowEvenWithAZeroFactor) {
  EXPECT_EQ(checked_product<int64_t>({}), 1);
  EXPECT_EQ(checked_product<int64_t>({2, 3, 4}), 24);
  EXPECT_EQ(checked_product<int64_t>({5, 0, 7}), 0);
  EXPECT_FALSE(checked_product<int64_t>({int64_t{1} << 40, int64_t{1} << 40}));
  EXPECT_FALSE(checked_product<int64_t>({int64_t{1} << 40, int64_t{1} << 40, 0}));
  EXPECT_FALSE(checked_product<int64_t>({int64_t{1} << 31, int64_t{1} << 31, 2}));  // 2^63
  EXPECT_EQ(checked_product<int64_t>({int64_t{1} << 31, int64_t{1} << 31, 1}), int64_t{1} << 62);
}

TEST(CheckedMath, AlignUpAndDivCeil) {
  EXPECT_EQ(checked_align_up<int64_t>(0, 64), 0);
  EXPECT_EQ(checked_align_up<int64_t>(1, 64), 64);
  EXPECT_EQ(checked_align_up<int64_t>(64, 64), 64);
  EXPECT_EQ(checked_align_up<int64_t>(65, 48), 96);  // not only powers of two
  EXPECT_EQ(checked_align_up<uint64_t>(kU64Max - 7, 8), kU64Max - 7);
  EXPECT_FALSE(checked_align_up<uint64_t>(kU64Max - 6, 8));  // the GGML_PAD wrap
  EXPECT_FALSE(checked_align_up<int64_t>(kI64Max, 2));
  EXPECT_FALSE(checked_align_up<int64_t>(5, 0));
  EXPECT_FALSE(checked_align_up<int64_t>(5, -8));
  EXPECT_FALSE(checked_align_up<int64_t>(-1, 8));
  EXPECT_EQ(checked_div_ceil<int64_t>(0, 64), 0);
  EXPECT_EQ(checked_div_ceil<int64_t>(65, 64), 2);
  EXPECT_EQ(checked_div_ceil<int64_t>(kI64Max, 1), kI64Max);  // no x + d - 1 overflow
  EXPECT_EQ(checked_div_ceil<int64_t>(kI64Max, 2), int64_t{1} << 62);
  EXPECT_FALSE(checked_div_ceil<int64_t>(1, 0));
}

TEST(CheckedMath, CastRejectsTruncationAndSignChange) {
  EXPECT_EQ(checked_cast<int32_t>(int64_t{2147483647}), 2147483647);
  EXPECT_FALSE(checked_cast<int32_t>(int64_t{2147483648}));
  EXPECT_FALSE(checked_cast<uint64_t>(int64_t{-1}));
  EXPECT_FALSE(checked_cast<int64_t>(kU64Max));
  EXPECT_EQ(checked_cast<size_t>(uint64_t{12}), size_t{12});
}

TEST(CheckedMath, RangeInsideAndCountFits) {
  EXPECT_TRUE(range_inside(0, 0, 0));
  EXPECT_TRUE(range_inside(10, 0, 10));
  EXPECT_FALSE(range_inside(11, 0, 10));
  EXPECT_TRUE(range_inside(2, 8, 10));
  EXPECT_FALSE(range_inside(3, 8, 10));
  EXPECT_FALSE(range_inside(8, kU64Max, 10));  // offset + length wraps to 7
  EXPECT_FALSE(range_inside(kU64Max, 2, kU64Max));
  EXPECT_TRUE(count_fits(10, 8, 80));
  EXPECT_FALSE(count_fits(11, 8, 80));
  EXPECT_FALSE(count_fits(kU64Max, 1, 100));
  EXPECT_TRUE(count_fits(100, 0, 100));  // a zero record size counts as one byte
}

TEST(ByteView, OnlyExistsInsideItsBuffer) {
  uint8_t buf[16] = {};
  for (int i = 0; i < 16; ++i) buf[i] = uint8_t(i);
  const auto v = ByteView::make(buf, 16, 4, 8);
  ASSERT_TRUE(v);
  EXPECT_EQ(v->data(), buf + 4);
  EXPECT_EQ(v->size(), 8u);
  EXPECT_EQ(v->span()[0], 4);
  EXPECT_FALSE(ByteView::make(buf, 16, 9, 8));
  EXPECT_FALSE(ByteView::make(buf, 16, 17, 0));
  EXPECT_FALSE(ByteView::make(buf, 16, 1, kU64Max));  // wraps
  EXPECT_FALSE(ByteView::make(nullptr, 16, 0, 1));
  const auto empty_end = ByteView::make(buf, 16, 16, 0);
  ASSERT_TRUE(empty_end);
  EXPECT_TRUE(empty_end->empty());
  const auto none = ByteView::make(nullptr, 0, 0, 0);
  ASSERT_TRUE(none);
  EXPECT_EQ(none->data(), nullptr);
  // Sub-views are checked against the view, not the whole buffer.
  EXPECT_TRUE(v->sub(0, 8));
  EXPECT_FALSE(v->sub(1, 8));
  EXPECT_EQ(v->sub(2, 3)->data(), buf + 6);
}

}  // namespace
}  // namespace mla
