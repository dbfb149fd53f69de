// Bad GGUF files, each built byte by byte so that one rule is broken at a time: open() must fail
// with a one-line message naming the file and the key, tensor or field, never crash.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "gguf_test_util.h"
#include "io/gguf.h"
#include "io/gguf_header.h"

namespace mla {
namespace {

using testing_io::failed_with;
using testing_io::GgufImage;
using testing_io::GgufMeta;
using testing_io::read_bytes;
using testing_io::write_bytes;

constexpr StatusCode kDataLoss = StatusCode::kDataLoss;
constexpr StatusCode kUnimplemented = StatusCode::kUnimplemented;
constexpr uint32_t kF32 = 0, kQ8_0 = 8, kF64 = 28;

class GgufReject : public ::testing::Test {
 protected:
  Result<GgufFile> open(const GgufImage& g) {
    write_bytes(path_, g.bytes);
    return GgufFile::open(path_);
  }
  // One tensor `w` of 4 F32 values after one metadata entry `before`.
  GgufImage one_tensor(uint64_t offset = 0, uint32_t type = kF32) {
    GgufImage g;
    g.header(1, 1).kv_str("general.architecture", "deepseek2").tensor("w", {4}, type, offset);
    return g.pad().zeros(size_t(offset) + 16);
  }
  testing_io::TempDir dir_;
  const std::string path_ = dir_.file("model.gguf");
};

TEST_F(GgufReject, ValidEdgeCasesAreAccepted) {
  ASSERT_TRUE(open(one_tensor()).ok());
  // No tensors, no padding after the header.
  GgufImage g;
  g.header(0, 1).kv_u32("x", 1);
  ASSERT_TRUE(open(g).ok()) << open(g).status().to_string();
  // Tensors in any offset order, a zero-size one anywhere, trailing bytes.
  g = {};
  g.header(3, 0).tensor("b", {8}, kF32, 64).tensor("a", {8}, kF32, 0).tensor("z", {0, 5}, kF32, 32);
  g.pad().zeros(96 + 7);
  Result<GgufFile> f = open(g);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->tensors()[0].name, "b");
  EXPECT_EQ(f->find("z")->shape, (std::vector<int64_t>{5, 0}));
  // Version 2 has the same layout.
  g = {};
  g.header(0, 0, 2);
  EXPECT_TRUE(open(g).ok());
}

TEST_F(GgufReject, TruncationAtEveryByte) {
  GgufMeta meta = {{"general.architecture", GgufValue::of_string("deepseek2")},
                   {"a.tokens", GgufValue::of_strings({"<s>", "x", ""})},
                   {"a.ints", GgufValue::of_ints(GgufType::kI64, {1, 2})},
                   {"a.f", GgufValue::of_floats(GgufType::kF32, {0.5})},
                   {"b", GgufValue::of_int(GgufType::kBool, 1)},
                   {"u16", GgufValue::of_int(GgufType::kU16, 9)}};
  ASSERT_TRUE(testing_io::write_gguf(path_, meta,
                                     {{"w", DType::kF32, {2, 3}}, {"q", DType::kQ8_0, {1, 32}}})
                  .ok());
  const std::string full = read_bytes(path_);
  Result<GgufFile> whole = GgufFile::open(path_);
  ASSERT_TRUE(whole.ok());
  uint64_t needed = 0;  // the end of the last tensor: the padding after it is optional
  for (const TensorInfo& t : whole->tensors())
    needed = std::max(needed, whole->data_offset() + t.byte_offset + t.byte_size);
  for (size_t len = 0; len < full.size(); ++len) {
    SCOPED_TRACE(len);
    // An exact-size copy, so that a read past the end is caught by the sanitizers.
    const std::vector<uint8_t> prefix(full.begin(), full.begin() + std::ptrdiff_t(len));
    Result<io_detail::ParsedGguf> r = io_detail::parse_gguf(path_, prefix.data(), len);
    if (len >= needed) {
      EXPECT_TRUE(r.ok()) << r.status().to_string();
    } else {
      EXPECT_TRUE(failed_with(r, kDataLoss, path_, {}));
    }
  }
  for (size_t len : {0ul, 3ul, 7ul, 20ul, 30ul, needed - 1}) {
    write_bytes(path_, full.substr(0, len));
    EXPECT_TRUE(failed_with(GgufFile::open(path_), kDataLoss, path_, {})) << len;
  }
  write_bytes(path_, full.substr(0, 40));
  EXPECT_TRUE(failed_with(GgufFile::open(path_), kDataLoss, path_, {"truncated"}));
}

TEST_F(GgufReject, BadMagicAndVersions) {
  EXPECT_TRUE(failed_with(open(GgufImage{}), kDataLoss, path_, {"fewer than the 4-byte magic"}));
  EXPECT_TRUE(failed_with(open(GgufImage().raw("GGU")), kDataLoss, path_, {"3 bytes"}));
  EXPECT_TRUE(failed_with(open(GgufImage().raw("GGML").u32(3).u64(0).u64(0)), kDataLoss, path_,
                          {"not a GGUF file", "\"GGML\""}));
  EXPECT_TRUE(failed_with(open(GgufImage().header(0, 0, 1)), kUnimplemented, path_,
                          {"version 1", "32-bit counts"}));
  EXPECT_TRUE(failed_with(open(GgufImage().header(0, 0, 4)), kUnimplemented, path_,
                          {"version 4", "newer"}));
  EXPECT_TRUE(failed_with(open(GgufImage().header(0, 0, 0x03000000)), kUnimplemented, path_,
                          {"big-endian"}));
  EXPECT_TRUE(failed_with(open(GgufImage().header(0, 0, 0)), kDataLoss, path_, {"version 0"}));
  EXPECT_TRUE(failed_with(open(GgufImage().raw("GGUF").u32(3).u64(0)), kDataLoss, path_,
                          {"metadata count", "truncated"}));
}

TEST_F(GgufReject, CountsLargerThanTheFileCanHold) {
  EXPECT_TRUE(failed_with(open(GgufImage().header(0, uint64_t(1) << 62)), kDataLoss, path_,
                          {"metadata count 4611686018427387904"}));
  EXPECT_TRUE(failed_with(open(GgufImage().header(~uint64_t(0), 0).zeros(64)), kDataLoss, path_,
                          {"tensor count 18446744073709551615"}));
  EXPECT_TRUE(failed_with(open(GgufImage().header(uint64_t(1) << 40, 0).zeros(64)), kDataLoss,
                          path_, {"tensor count 1099511627776"}));
  GgufImage g;
  g.header(0, 1).str("k").u32(9).u32(0).u64(uint64_t(1) << 20).zeros(100);  // 2^20 u8
  EXPECT_TRUE(failed_with(open(g), kDataLoss, path_, {"key \"k\"", "array of 1048576 u8"}));
  g = {};
  g.header(0, 1).str("k").u32(9).u32(8).u64(100).zeros(799);  // 100 strings: 800 bytes at least
  EXPECT_TRUE(failed_with(open(g), kDataLoss, path_, {"key \"k\"", "array of 100 string"}));
  g = {};
  g.header(0, 1).str("k").u32(9).u32(8).u64(3).str("a").u64(10);  // 3 strings, 2nd runs out
  EXPECT_TRUE(failed_with(open(g.zeros(9)), kDataLoss, path_, {"key \"k\" element 1", "string"}));
  g = {};
  g.header(0, 1).str("k").u32(9).u32(0).u64(kGgufMaxArrayElems + 1);
  EXPECT_TRUE(failed_with(open(g), kDataLoss, path_, {"key \"k\"", "more than the limit"}));
}

TEST_F(GgufReject, StringsPastTheEndOrTooLong) {
  GgufImage g;
  g.header(0, 1).u64(1000).raw("abc").zeros(16);
  EXPECT_TRUE(failed_with(open(g), kDataLoss, path_, {"metadata entry 0", "key", "truncated"}));
  g = {};
  g.header(0, 1).str("k").u32(8).u64(50).raw("short");
  EXPECT_TRUE(failed_with(open(g), kDataLoss, path_, {"key \"k\"", "string value", "truncated"}));
  g = {};
  g.header(0, 1).str("k").u32(8).u64(kGgufMaxStringBytes + 1);
  EXPECT_TRUE(failed_with(open(g), kDataLoss, path_, {"key \"k\"", "more than the limit"}));
  g = {};
  g.header(1, 0).u64(~uint64_t(0));
  EXPECT_TRUE(failed_with(open(g.zeros(40)), kDataLoss, path_, {"tensor info 0", "name"}));
}

TEST_F(GgufReject, BadKeysAndValues) {
  GgufImage g;
  g.header(0, 2).kv_u32("a", 1).kv_u32("a", 2);
  EXPECT_TRUE(failed_with(open(g), kDataLoss, path_, {"key \"a\"", "appears twice"}));
  g = {};
  g.header(0, 1).kv_u32("", 1);
  EXPECT_TRUE(failed_with(open(g), kDataLoss, path_, {"metadata entry 0", "key is empty"}));
  g = {};
  g.header(0, 1).kv_u32("k\xff", 1);
  EXPECT_TRUE(failed_with(open(g), kDataLoss, path_, {"metadata entry 0", "UTF-8"}));
  g = {};
  g.header(0, 1).str("flag").u32(7).u8(2);
  EXPECT_TRUE(failed_with(open(g), kDataLoss, path_, {"key \"flag\"", "bool value 2"}));
  g = {};
  g.header(0, 1).str("big").u32(10).u64(~uint64_t(0));
  EXPECT_TRUE(failed_with(open(g), kDataLoss, path_, {"key \"big\"", "u64 value"}));
  g = {};
  g.header(0, 1).str("k").u32(13).u32(0);
  EXPECT_TRUE(failed_with(open(g), kDataLoss, path_, {"key \"k\"", "value type 13"}));
  g = {};
  g.header(0, 1).str("k").u32(9).u32(9).u64(1);
  EXPECT_TRUE(failed_with(open(g.zeros(16)), kDataLoss, path_, {"key \"k\"", "arrays of arrays"}));
  g = {};
  g.header(0, 1).str("k").u32(9).u32(99).u64(1);
  EXPECT_TRUE(failed_with(open(g.zeros(16)), kDataLoss, path_, {"key \"k\"", "element type 99"}));
  g = {};
  g.header(0, 1).str("k").u32(9).u32(7).u64(2).u8(1).u8(5);
  EXPECT_TRUE(failed_with(open(g), kDataLoss, path_, {"key \"k\" element 1", "bool value 5"}));
}

TEST_F(GgufReject, BadAlignment) {
  for (uint32_t a : {0u, 3u, 48u}) {
    GgufImage g;
    g.header(0, 1).kv_u32("general.alignment", a);
    EXPECT_TRUE(failed_with(open(g), kDataLoss, path_,
                            {"general.alignment", std::to_string(a), "power of two"}));
  }
  GgufImage g;
  g.header(0, 1).str("general.alignment").u32(5).u32(32);  // i32
  EXPECT_TRUE(failed_with(open(g), kDataLoss, path_, {"general.alignment", "type i32"}));
}

TEST_F(GgufReject, BadTensorInfos) {
  auto one = [](std::string_view name, std::initializer_list<uint64_t> ne, uint32_t type,
                uint64_t offset = 0) {
    GgufImage g;
    g.header(1, 0).tensor(name, ne, type, offset);
    return g.pad().zeros(256);
  };
  EXPECT_TRUE(
      failed_with(open(one("", {4}, kF32)), kDataLoss, path_, {"tensor info 0", "name is empty"}));
  EXPECT_TRUE(
      failed_with(open(one("w\xc0\xaf", {4}, kF32)), kDataLoss, path_, {"tensor info 0", "UTF-8"}));
  EXPECT_TRUE(
      failed_with(open(one("w", {}, kF32)), kDataLoss, path_, {"tensor \"w\"", "n_dims is 0"}));
  EXPECT_TRUE(failed_with(open(one("w", {1, 1, 1, 1, 1}, kF32)), kDataLoss, path_,
                          {"tensor \"w\"", "n_dims is 5"}));
  EXPECT_TRUE(failed_with(open(one("w", {1, ~uint64_t(0)}, kF32)), kDataLoss, path_,
                          {"tensor \"w\"", "ne[1]", "18446744073709551615"}));
  EXPECT_TRUE(failed_with(open(one("w", {uint64_t(1) << 32, uint64_t(1) << 32}, kF32)), kDataLoss,
                          path_, {"tensor \"w\"", "more than 2^63-1 elements"}));
  EXPECT_TRUE(failed_with(open(one("w", {uint64_t(1) << 62}, kF64)), kDataLoss, path_,
                          {"tensor \"w\"", "more than 2^64-1 bytes"}));
  EXPECT_TRUE(failed_with(open(one("w", {33, 2}, kQ8_0)), kDataLoss, path_,
                          {"tensor \"w\"", "innermost dim 33", "32-value block"}));
  EXPECT_TRUE(failed_with(open(one("w", {128}, 12)), kDataLoss, path_,
                          {"tensor \"w\"", "Q4_K", "256-value block"}));
  EXPECT_TRUE(failed_with(open(one("w", {4}, kF32, 16)), kDataLoss, path_,
                          {"tensor \"w\"", "offset 16", "alignment 32"}));
  EXPECT_TRUE(
      failed_with(open(one("w", {4}, 77)), kUnimplemented, path_, {"tensor \"w\"", "type 77"}));
  EXPECT_TRUE(failed_with(open(one("w", {256}, 16)), kUnimplemented, path_,
                          {"tensor \"w\"", "IQ2_XXS", "code 16"}));
  EXPECT_TRUE(failed_with(open(one("w", {4}, 4)), kUnimplemented, path_, {"\"w\"", "type 4"}));
}

TEST_F(GgufReject, TensorTableAndDataSection) {
  GgufImage g;
  g.header(2, 0).tensor("w", {4}, kF32, 0).tensor("w", {4}, kF32, 32);
  EXPECT_TRUE(failed_with(open(g.pad().zeros(64)), kDataLoss, path_,
                          {"tensor \"w\" appears twice", "tensor infos 0 and 1"}));
  g = {};
  g.header(2, 0).tensor("a", {16}, kF32, 0).tensor("b", {16}, kF32, 32);
  EXPECT_TRUE(failed_with(open(g.pad().zeros(128)), kDataLoss, path_,
                          {"tensor \"b\"", "overlap tensor \"a\""}));
  g = {};  // one inside another, listed first
  g.header(2, 0).tensor("in", {4}, kF32, 32).tensor("out", {32}, kF32, 0);
  EXPECT_TRUE(failed_with(open(g.pad().zeros(128)), kDataLoss, path_,
                          {"tensor \"in\"", "overlap tensor \"out\""}));
  g = {};
  g.header(1, 0).tensor("w", {16}, kF32, 0);
  EXPECT_TRUE(failed_with(open(g.pad().zeros(32)), kDataLoss, path_,
                          {"tensor \"w\"", "[0, +64)", "past the end of the data section"}));
  g = {};
  g.header(1, 0).tensor("w", {4}, kF32, uint64_t(1) << 63);
  EXPECT_TRUE(
      failed_with(open(g.pad().zeros(32)), kDataLoss, path_, {"tensor \"w\"", "past the end"}));
  g = {};  // the data section would start after the end of the file
  g.header(1, 0).tensor("w", {0}, kF32, 0);
  EXPECT_TRUE(failed_with(open(g), kDataLoss, path_, {"data section would start", "truncated"}));
}

TEST_F(GgufReject, NotAFile) {
  EXPECT_TRUE(failed_with(GgufFile::open(dir_.file("absent.gguf")), StatusCode::kNotFound,
                          dir_.file("absent.gguf"), {"cannot open"}));
  EXPECT_TRUE(failed_with(GgufFile::open(dir_.path()), StatusCode::kIoError, dir_.path(),
                          {"not a regular file"}));
  EXPECT_TRUE(failed_with(GgufSet::open(dir_.file("absent.gguf")), StatusCode::kNotFound,
                          dir_.file("absent.gguf"), {}));
}

}  // namespace
}  // namespace mla
