// Tests of KV cache sizing: page-size rules, page alignment, budget → blocks (with overflow) and
// MemAvailable parsing.
#include "cache/cache_capacity.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>

#include "core/kv_format.h"

namespace mla {
namespace {

TEST(CacheCapacity, PageSizeIsAPowerOfTwoUpTo256) {
  for (int p = 1; p <= 256; p *= 2) EXPECT_TRUE(validate_page_size(p).ok()) << p;
  for (int p : {0, -1, 3, 48, 96, 512, 1 << 30}) {
    Status s = validate_page_size(p);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << p;
    EXPECT_NE(s.message().find(std::to_string(p)), std::string::npos) << s.message();
  }
}

TEST(CacheCapacity, PageBytesAtDeepSeekDims) {
  // docs/kernels/kv_formats.md §Memory per token: a 64-token BF16 page is 73,728 bytes.
  EXPECT_EQ(*kv_page_bytes(kv_bytes_per_token(KvCacheDtype::kBF16, 512, 64), 64), 73728);
  EXPECT_EQ(*kv_page_bytes(656, 64), 656 * 64);
  EXPECT_EQ(*kv_page_bytes(416, 64), 416 * 64);
  // Every page size keeps BF16 pages 64-byte aligned (1,152 = 18 · 64).
  for (int p = 1; p <= 256; p *= 2) EXPECT_TRUE(kv_page_bytes(1152, p).ok()) << p;
}

TEST(CacheCapacity, UnalignedPagesAreRejectedWithTheSmallestPageThatWorks) {
  // 656 = 16 · 41: pages of 1 or 2 tokens would leave later page bases 16- or 32-byte aligned.
  for (int p : {1, 2}) {
    auto r = kv_page_bytes(656, p);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("page_size >= 4"), std::string::npos)
        << r.status().message();
  }
  EXPECT_TRUE(kv_page_bytes(656, 4).ok());
  EXPECT_FALSE(kv_page_bytes(416, 1).ok());
  EXPECT_TRUE(kv_page_bytes(416, 2).ok());
  EXPECT_FALSE(kv_page_bytes(0, 64).ok());
  EXPECT_FALSE(kv_page_bytes(-16, 64).ok());
  EXPECT_FALSE(kv_page_bytes(1152, 3).ok());
}

TEST(CacheCapacity, BlocksForBudget) {
  // V3: 61 layers of 64-token BF16 pages = 4,497,408 bytes a block.
  const uint64_t block = 61ull * 73728;
  EXPECT_EQ(*num_blocks_for_budget(block, 1152, 61, 64), 1);
  EXPECT_EQ(*num_blocks_for_budget(block * 1000 + block - 1, 1152, 61, 64), 1000);
  EXPECT_EQ(*num_blocks_for_budget(80ull << 30, 1152, 61, 64), (80ull << 30) / block);
  auto none = num_blocks_for_budget(block - 1, 1152, 61, 64);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(none.status().message().find(std::to_string(block)), std::string::npos);
  EXPECT_FALSE(num_blocks_for_budget(1ull << 40, 1152, 0, 64).ok());
  EXPECT_FALSE(num_blocks_for_budget(1ull << 40, 1152, 61, 100).ok());
}

TEST(CacheCapacity, BudgetArithmeticDoesNotOverflow) {
  // The largest inputs: page 2^40 · 256 bytes times INT32_MAX layers overflows 64 bits, and a
  // 2^64 − 1 byte budget of 64-byte blocks exceeds the int32 id space (capped).
  auto huge = num_blocks_for_budget(UINT64_MAX, int64_t{1} << 40, INT32_MAX, 256);
  EXPECT_FALSE(huge.ok());
  EXPECT_EQ(*num_blocks_for_budget(UINT64_MAX, 64, 1, 1), kMaxKvBlocks);
}

TEST(CacheCapacity, ParsesMemAvailable) {
  const char* meminfo =
      "MemTotal:       131072000 kB\n"
      "MemFree:         1000000 kB\n"
      "MemAvailable:   65536000 kB\n"
      "Buffers:           1234 kB\n";
  EXPECT_EQ(*parse_mem_available(meminfo), 65536000ull * 1024);
  EXPECT_EQ(parse_mem_available("MemTotal: 1 kB\n").status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(parse_mem_available("MemAvailable: x kB\n").status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(parse_mem_available("MemAvailable: 12 MB\n").status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(parse_mem_available("MemAvailable: 99999999999999999999 kB").status().code(),
            StatusCode::kDataLoss);
  EXPECT_EQ(*parse_mem_available("MemAvailable: 7 kB"), 7168u);  // no trailing newline
}

TEST(CacheCapacity, FractionOfAvailableMemory) {
  const std::string path = testing::TempDir() + "/mla_meminfo_test";
  {
    std::ofstream out(path);
    out << "MemTotal: 4000 kB\nMemAvailable: 1000 kB\n";
  }
  EXPECT_EQ(*budget_from_available_fraction(0.5, path), 512000u);
  EXPECT_EQ(*budget_from_available_fraction(1.0, path), 1024000u);
  for (double f : {0.0, -0.1, 1.5, std::nan("")})
    EXPECT_EQ(budget_from_available_fraction(f, path).status().code(),
              StatusCode::kInvalidArgument);
  std::remove(path.c_str());
  EXPECT_EQ(read_mem_available(path).status().code(), StatusCode::kIoError);
  // The machine's own /proc/meminfo parses and reports something.
  auto real = read_mem_available();
  ASSERT_TRUE(real.ok()) << real.status().to_string();
  EXPECT_GT(*real, 0u);
}

}  // namespace
}  // namespace mla
