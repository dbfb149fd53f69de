// Tests of AlignedBuffer<T>: alignment, sizes, move semantics, and allocation failure as a Status.
#include "core/aligned_buffer.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

// allocate() must report failure as a Status, but ASan by default aborts on an impossible request
// instead of returning null as glibc does; let it return null so the build under test keeps the
// shipped behaviour.
#if defined(__SANITIZE_ADDRESS__)
extern "C" const char* __asan_default_options() {
  return "allocator_may_return_null=1";
}
#endif

namespace mla {
namespace {

struct Rgb {
  uint8_t r, g, b;
};

template <typename T>
void expect_aligned_and_usable(size_t n) {
  AlignedBuffer<T> buf(n);
  EXPECT_EQ(buf.size(), n);
  EXPECT_EQ(buf.size_bytes(), n * sizeof(T));
  EXPECT_EQ(buf.empty(), n == 0);
  if (n == 0) return;
  ASSERT_NE(buf.data(), nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buf.data()) % kBufferAlignment, 0u) << "n=" << n;
  EXPECT_EQ(buf.end() - buf.begin(), std::ptrdiff_t(n));
  // Touch every byte: ASan flags a buffer shorter than size_bytes().
  auto* bytes = reinterpret_cast<unsigned char*>(buf.data());
  for (size_t i = 0; i < buf.size_bytes(); ++i) bytes[i] = static_cast<unsigned char>(i);
  EXPECT_EQ(bytes[buf.size_bytes() - 1], static_cast<unsigned char>(buf.size_bytes() - 1));
}

template <typename T>
void expect_aligned_for_many_sizes() {
  for (size_t n = 0; n <= 300; ++n) expect_aligned_and_usable<T>(n);
  for (size_t n : {size_t{1} << 16, (size_t{1} << 20) + 1, (size_t{1} << 22) - 3})
    expect_aligned_and_usable<T>(n);
}

TEST(AlignedBuffer, AlignedForManySizesAndTypes) {
  expect_aligned_for_many_sizes<uint8_t>();
  expect_aligned_for_many_sizes<uint16_t>();
  expect_aligned_for_many_sizes<float>();
  expect_aligned_for_many_sizes<double>();
  expect_aligned_for_many_sizes<Rgb>();  // 3-byte elements: sizes that are no multiple of 64
}

TEST(AlignedBuffer, DefaultIsEmpty) {
  AlignedBuffer<float> b;
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(b.size(), 0u);
  EXPECT_EQ(b.size_bytes(), 0u);
  EXPECT_EQ(b.data(), nullptr);
  EXPECT_EQ(b.begin(), b.end());
}

TEST(AlignedBuffer, ElementAccessAndIteration) {
  AlignedBuffer<int> b(10);
  for (size_t i = 0; i < b.size(); ++i) b[i] = int(i * i);
  int sum = 0;
  for (int v : b) sum += v;
  EXPECT_EQ(sum, 285);
  const AlignedBuffer<int>& c = b;
  EXPECT_EQ(c[3], 9);
  EXPECT_EQ(c.data(), b.data());
  EXPECT_EQ(*(c.end() - 1), 81);
}

TEST(AlignedBuffer, MoveConstructionTransfersOwnership) {
  AlignedBuffer<double> a(100);
  a[99] = 1.5;
  double* const p = a.data();
  AlignedBuffer<double> b(std::move(a));
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(b.size(), 100u);
  EXPECT_EQ(b[99], 1.5);
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move): the moved-from state is API
  EXPECT_EQ(a.size(), 0u);
  EXPECT_TRUE(a.empty());
}

TEST(AlignedBuffer, MoveAssignmentReleasesOldAndTransfers) {
  AlignedBuffer<float> a(64), b(7);
  float* const pa = a.data();
  b = std::move(a);  // b's old block is freed: LeakSanitizer checks that
  EXPECT_EQ(b.data(), pa);
  EXPECT_EQ(b.size(), 64u);
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(a.size(), 0u);

  AlignedBuffer<float>& alias = b;
  b = std::move(alias);  // self-move keeps the buffer
  EXPECT_EQ(b.data(), pa);
  EXPECT_EQ(b.size(), 64u);

  b = AlignedBuffer<float>();
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(b.data(), nullptr);
}

TEST(AlignedBuffer, MovedIntoVector) {
  std::vector<AlignedBuffer<uint8_t>> v;
  for (size_t i = 1; i <= 50; ++i) v.emplace_back(i);  // reallocation moves the buffers
  for (size_t i = 0; i < v.size(); ++i) {
    EXPECT_EQ(v[i].size(), i + 1);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(v[i].data()) % kBufferAlignment, 0u);
  }
}

TEST(AlignedBuffer, AllocateSucceeds) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{1000}}) {
    Result<AlignedBuffer<float>> r = AlignedBuffer<float>::allocate(n, "activations");
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->size(), n);
    if (n) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(r->data()) % kBufferAlignment, 0u);
    }
  }
}

template <typename T>
void expect_absurd_allocation_fails(const char* type) {
  // SIZE_MAX / 2 elements: for 1-byte types this reaches the allocator (2^63 bytes), for wider
  // types the overflow guard; both must come back as a Status, not an abort or an exception.
  const std::string what = std::string("kv cache blocks of ") + type;
  Result<AlignedBuffer<T>> r = AlignedBuffer<T>::allocate(SIZE_MAX / 2, what);
  ASSERT_FALSE(r.ok()) << type;
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfMemory) << type;
  EXPECT_NE(r.status().message().find(what), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("cannot allocate"), std::string::npos)
      << r.status().message();
  // The request is reported as it was made, not as a wrapped byte product.
  EXPECT_NE(r.status().message().find(std::to_string(SIZE_MAX / 2) + " elements of " +
                                      std::to_string(sizeof(T)) + " bytes"),
            std::string::npos)
      << r.status().message();
}

TEST(AlignedBuffer, AbsurdAllocationReturnsOutOfMemory) {
  expect_absurd_allocation_fails<uint8_t>("uint8_t");
  expect_absurd_allocation_fails<uint16_t>("uint16_t");
  expect_absurd_allocation_fails<float>("float");
  expect_absurd_allocation_fails<double>("double");
  expect_absurd_allocation_fails<Rgb>("Rgb");
  // SIZE_MAX itself: n * sizeof(T) must not wrap into a small, successful request.
  EXPECT_FALSE(AlignedBuffer<uint8_t>::allocate(SIZE_MAX, "x").ok());
  EXPECT_FALSE(AlignedBuffer<float>::allocate(SIZE_MAX / 4 + 1, "x").ok());
}

}  // namespace
}  // namespace mla
