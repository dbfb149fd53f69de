// Bad safetensors files (docs/RELIABILITY.md §Checklist R1-R15), each built byte by byte: open()
// must fail with a one-line message naming the file and the offending tensor or field.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdint>
#include <string>

#include "io/safetensors.h"
#include "safetensors_test_util.h"

namespace mla {
namespace {

using testing_io::failed_with;
using testing_io::image;
using testing_io::le64;

constexpr StatusCode kDataLoss = StatusCode::kDataLoss;

using testing_io::entry;
using SafetensorsReject = testing_io::SafetensorsFileTest;

TEST_F(SafetensorsReject, FileShorterThanLengthPrefix) {  // item 1
  EXPECT_TRUE(failed_with(open_bytes(""), kDataLoss, path_, {"header too small", "0 bytes"}));
  EXPECT_TRUE(failed_with(open_bytes(std::string(7, '\0')), kDataLoss, path_,
                          {"header too small", "7 bytes"}));
}

TEST_F(SafetensorsReject, HeaderLengthTooLargeOrPastEndOfFile) {  // items 2, 3
  EXPECT_TRUE(failed_with(open_bytes(le64(100'000'001) + "{}"), kDataLoss, path_,
                          {"header length 100000001", "limit"}));
  EXPECT_TRUE(failed_with(open_bytes(le64(3) + "{}"), kDataLoss, path_,
                          {"header length 3", "past the end"}));
  EXPECT_TRUE(failed_with(open_bytes(le64(~uint64_t(0)) + "{}"), kDataLoss, path_,
                          {"header length 18446744073709551615"}));
  EXPECT_TRUE(failed_with(open_bytes(le64(~uint64_t(0) - 7) + "{}"), kDataLoss, path_,
                          {"header length 18446744073709551608"}));  // N + 8 wraps to 0
  EXPECT_TRUE(failed_with(open_bytes(le64(0)), kDataLoss, path_, {"does not start with '{'"}));
}

TEST_F(SafetensorsReject, HeaderNotUtf8JsonObject) {  // item 4
  EXPECT_TRUE(failed_with(open_bytes(image("{\"a\xff\":{}}")), kDataLoss, path_, {"UTF-8"}));
  EXPECT_TRUE(failed_with(open_bytes(image("{\"\xc0\xaf\":{}}")), kDataLoss, path_,
                          {"UTF-8"}));  // overlong "/"
  EXPECT_TRUE(failed_with(open_bytes(image("{\"\xed\xa0\x80\":{}}")), kDataLoss, path_,
                          {"UTF-8"}));  // a surrogate
  EXPECT_TRUE(
      failed_with(open_bytes(image("{\"a\":")), kDataLoss, path_, {"not valid UTF-8 JSON"}));
  EXPECT_TRUE(failed_with(open_bytes(image("{abc}")), kDataLoss, path_, {"not valid UTF-8 JSON"}));
  EXPECT_TRUE(failed_with(open_bytes(image("{}{}")), kDataLoss, path_, {"not valid UTF-8 JSON"}));
  EXPECT_TRUE(failed_with(open_bytes(image("{} x")), kDataLoss, path_, {"not valid UTF-8 JSON"}));
  EXPECT_TRUE(failed_with(open_bytes(image("{/*c*/}")), kDataLoss, path_, {"not valid"}));
  EXPECT_TRUE(failed_with(open_bytes(image("[]")), kDataLoss, path_, {"does not start with '{'"}));
  EXPECT_TRUE(failed_with(open_bytes(image("\"x\"")), kDataLoss, path_, {"does not start"}));
  EXPECT_TRUE(failed_with(open_bytes(image(" {}")), kDataLoss, path_, {"does not start"}));
  EXPECT_TRUE(failed_with(open_bytes(image("\xef\xbb\xbf{}")), kDataLoss, path_,
                          {"does not start", "\\xef"}));  // a BOM
}

TEST_F(SafetensorsReject, NulPaddingInsteadOfSpaces) {  // item 5
  EXPECT_TRUE(failed_with(open_bytes(image(std::string("{}\0\0\0\0\0\0", 8))), kDataLoss, path_,
                          {"NUL byte at offset 2"}));
  // Whatever follows the NUL must not be skipped either.
  EXPECT_TRUE(failed_with(open_bytes(image(std::string("{}\0garbage", 10))), kDataLoss, path_,
                          {"NUL byte at offset 2"}));
  EXPECT_TRUE(failed_with(open_bytes(image(std::string("{\"a\0\":1}", 8))), kDataLoss, path_,
                          {"NUL byte at offset 3"}));
}

TEST_F(SafetensorsReject, DuplicateKeysAnywhere) {  // item 6
  const std::string t = entry("w", "\"U8\"", "[1]", "[0,1]");
  EXPECT_TRUE(failed_with(open_header(t + "," + entry("w", "\"U8\"", "[1]", "[1,2]"), "ab"),
                          kDataLoss, path_, {"tensor \"w\"", "twice"}));
  EXPECT_TRUE(failed_with(open_header(R"("__metadata__":{},"__metadata__":{},)" + t, "a"),
                          kDataLoss, path_, {"\"__metadata__\" appears twice"}));
  EXPECT_TRUE(failed_with(open_header(R"("__metadata__":{"k":"1","k":"2"},)" + t, "a"), kDataLoss,
                          path_, {"__metadata__", "\"k\"", "twice"}));
  EXPECT_TRUE(failed_with(
      open_header(R"("w":{"dtype":"U8","dtype":"U8","shape":[1],"data_offsets":[0,1]})", "a"),
      kDataLoss, path_, {"tensor \"w\"", "dtype", "twice"}));
}

TEST_F(SafetensorsReject, MetadataNotStringToString) {  // item 7
  const std::string t = "," + entry("w", "\"U8\"", "[1]", "[0,1]");
  EXPECT_TRUE(failed_with(open_header(R"("__metadata__":{"k":1})" + t, "a"), kDataLoss, path_,
                          {"__metadata__", "\"k\"", "not a string", "got 1"}));
  EXPECT_TRUE(failed_with(open_header(R"("__metadata__":{"k":{"x":"y"}})" + t, "a"), kDataLoss,
                          path_, {"__metadata__", "\"k\"", "not a string", "an object"}));
  EXPECT_TRUE(failed_with(open_header(R"("__metadata__":{"k":null})" + t, "a"), kDataLoss, path_,
                          {"__metadata__", "\"k\"", "null"}));
  EXPECT_TRUE(failed_with(open_header(R"("__metadata__":{"k":["v"]})" + t, "a"), kDataLoss, path_,
                          {"__metadata__", "\"k\"", "an array"}));
  EXPECT_TRUE(failed_with(open_header(R"("__metadata__":["k"])" + t, "a"), kDataLoss, path_,
                          {"\"__metadata__\" is not an object"}));
  EXPECT_TRUE(failed_with(open_header(R"("__metadata__":"k")" + t, "a"), kDataLoss, path_,
                          {"\"__metadata__\" is not an object"}));
}

TEST_F(SafetensorsReject, BadDtype) {  // item 8
  EXPECT_TRUE(failed_with(open_header(entry("w", "\"F7\"", "[1]", "[0,1]"), "a"), kDataLoss, path_,
                          {"tensor \"w\"", "dtype \"F7\""}));
  EXPECT_TRUE(failed_with(open_header(entry("w", "\"f32\"", "[1]", "[0,4]"), "abcd"), kDataLoss,
                          path_, {"tensor \"w\"", "dtype \"f32\""}));
  EXPECT_TRUE(failed_with(open_header(entry("w", "\"F8_E5M2\"", "[1]", "[0,1]"), "a"),
                          StatusCode::kUnimplemented, path_,
                          {"tensor \"w\"", "dtype \"F8_E5M2\"", "not supported"}));
  EXPECT_TRUE(failed_with(open_header(entry("w", "32", "[1]", "[0,4]"), "abcd"), kDataLoss, path_,
                          {"tensor \"w\"", "dtype is not a string"}));
  // Sub-byte: 3 E2M1 values are 12 bits.
  EXPECT_TRUE(failed_with(open_header(entry("q", "\"F4\"", "[3]", "[0,2]"), "ab"), kDataLoss, path_,
                          {"tensor \"q\"", "shape [3] of F4", "12 bits", "whole number of bytes"}));
}

TEST_F(SafetensorsReject, BadShape) {  // item 9
  auto shape = [&](std::string_view s) {
    return open_header(entry("s", "\"U8\"", s, "[0,1]"), "a");
  };
  EXPECT_TRUE(
      failed_with(shape("[-1]"), kDataLoss, path_, {"tensor \"s\"", "shape entry 0", "-1"}));
  EXPECT_TRUE(
      failed_with(shape("[1,1.5]"), kDataLoss, path_, {"tensor \"s\"", "shape entry 1", "1.5"}));
  EXPECT_TRUE(failed_with(shape("[1.0]"), kDataLoss, path_, {"tensor \"s\"", "shape", "1.0"}));
  EXPECT_TRUE(failed_with(shape("[1e0]"), kDataLoss, path_, {"tensor \"s\"", "shape", "1e0"}));
  EXPECT_TRUE(failed_with(shape("[9223372036854775808]"), kDataLoss, path_,
                          {"tensor \"s\"", "shape entry 0", "9223372036854775808", "2^63-1"}));
  EXPECT_TRUE(failed_with(shape("[18446744073709551616]"), kDataLoss, path_,
                          {"tensor \"s\"", "shape entry 0", "18446744073709551616"}));
  EXPECT_TRUE(failed_with(shape("[\"1\"]"), kDataLoss, path_, {"tensor \"s\"", "a string"}));
  EXPECT_TRUE(failed_with(shape("[[1]]"), kDataLoss, path_, {"tensor \"s\"", "an array"}));
  EXPECT_TRUE(failed_with(shape("[true]"), kDataLoss, path_, {"tensor \"s\"", "true"}));
  EXPECT_TRUE(failed_with(shape("1"), kDataLoss, path_, {"tensor \"s\"", "shape is not an array"}));
  EXPECT_TRUE(
      failed_with(shape("null"), kDataLoss, path_, {"tensor \"s\"", "shape is not an array"}));
  // 2^32 * 2^32 = 2^64 elements; 2^61 * 2 F64 elements = 2^68 bits.
  EXPECT_TRUE(failed_with(open_header(entry("o", "\"U8\"", "[4294967296,4294967296]", "[0,0]")),
                          kDataLoss, path_, {"tensor \"o\"", "more than 2^63-1 elements"}));
  EXPECT_TRUE(failed_with(open_header(entry("o", "\"F64\"", "[2305843009213693952,2]", "[0,0]")),
                          kDataLoss, path_, {"tensor \"o\"", "of F64", "2^64-1 bits"}));
  // A zero dim does not excuse an overflowing product of the other dims.
  EXPECT_TRUE(failed_with(open_header(entry("o", "\"U8\"", "[0,4294967296,4294967296]", "[0,0]")),
                          kDataLoss, path_, {"tensor \"o\"", "more than 2^63-1 elements"}));
}

TEST_F(SafetensorsReject, BadDataOffsets) {  // item 10
  auto offs = [&](std::string_view o) { return open_header(entry("t", "\"U8\"", "[1]", o), "a"); };
  EXPECT_TRUE(
      failed_with(offs("[0]"), kDataLoss, path_, {"tensor \"t\"", "data_offsets has 1 entries"}));
  EXPECT_TRUE(
      failed_with(offs("[]"), kDataLoss, path_, {"tensor \"t\"", "data_offsets has 0 entries"}));
  EXPECT_TRUE(failed_with(offs("[0,1,2]"), kDataLoss, path_,
                          {"tensor \"t\"", "data_offsets has more than 2 entries"}));
  EXPECT_TRUE(failed_with(offs("[-1,0]"), kDataLoss, path_,
                          {"tensor \"t\"", "data_offsets entry 0", "-1"}));
  EXPECT_TRUE(failed_with(offs("[0,1.0]"), kDataLoss, path_,
                          {"tensor \"t\"", "data_offsets entry 1", "1.0"}));
  EXPECT_TRUE(
      failed_with(offs("[0,\"1\"]"), kDataLoss, path_, {"tensor \"t\"", "data_offsets entry 1"}));
  EXPECT_TRUE(failed_with(offs("{\"a\":0}"), kDataLoss, path_,
                          {"tensor \"t\"", "data_offsets is not an array"}));
  EXPECT_TRUE(
      failed_with(offs("[1,0]"), kDataLoss, path_, {"tensor \"t\"", "[1, 0]", "begin after end"}));
}

TEST_F(SafetensorsReject, BadEntryStructure) {
  EXPECT_TRUE(
      failed_with(open_header(R"("t":1)"), kDataLoss, path_, {"tensor \"t\"", "not an object"}));
  EXPECT_TRUE(
      failed_with(open_header(R"("t":[])"), kDataLoss, path_, {"tensor \"t\"", "not an object"}));
  EXPECT_TRUE(failed_with(open_header(R"("t":{"dtype":"U8","shape":[1]})", "a"), kDataLoss, path_,
                          {"tensor \"t\"", "missing field \"data_offsets\""}));
  EXPECT_TRUE(failed_with(open_header(R"("t":{"shape":[0],"data_offsets":[0,0]})"), kDataLoss,
                          path_, {"tensor \"t\"", "missing field \"dtype\""}));
  EXPECT_TRUE(failed_with(open_header(R"("t":{})"), kDataLoss, path_, {"tensor \"t\"", "missing"}));
  EXPECT_TRUE(failed_with(
      open_header(R"("t":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"extra":1})", "a"),
      kDataLoss, path_, {"tensor \"t\"", "unknown field \"extra\""}));
}

TEST_F(SafetensorsReject, SizeDisagreesWithShape) {  // item 11
  const std::string name = "layers.0.kv_b_proj.weight";
  Result<SafetensorsFile> r =
      open_header(entry(name, "\"BF16\"", "[4, 8]", "[0, 100]"), std::string(100, 'x'));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            path_ +
                ": tensor \"layers.0.kv_b_proj.weight\": data_offsets [0, 100] hold 100 bytes "
                "but shape [4, 8] of BF16 needs 64");
  EXPECT_TRUE(failed_with(open_header(entry("s", "\"F32\"", "[]", "[0,0]")), kDataLoss, path_,
                          {"tensor \"s\"", "hold 0 bytes but shape [] of F32 needs 4"}));
  EXPECT_TRUE(failed_with(open_header(entry("s", "\"F32\"", "[0]", "[0,4]"), "abcd"), kDataLoss,
                          path_, {"tensor \"s\"", "hold 4 bytes but shape [0] of F32 needs 0"}));
}

TEST_F(SafetensorsReject, OverlapsAndAliases) {  // item 12
  EXPECT_TRUE(failed_with(open_header(entry("a", "\"U8\"", "[8]", "[0,8]") + "," +
                                          entry("b", "\"U8\"", "[8]", "[4,12]"),
                                      std::string(12, 'x')),
                          kDataLoss, path_, {"tensor \"b\"", "[4, 12]", "overlap tensor \"a\""}));
  EXPECT_TRUE(failed_with(open_header(entry("k_proj", "\"U8\"", "[8]", "[0,8]") + "," +
                                          entry("v_proj", "\"U8\"", "[2,4]", "[0,8]"),
                                      std::string(8, 'x')),
                          kDataLoss, path_, {"tensor \"v_proj\"", "overlap tensor \"k_proj\""}));
  // A zero-size tensor inside another's range counts as an overlap (as in the Rust reader).
  EXPECT_TRUE(failed_with(
      open_header(entry("a", "\"U8\"", "[8]", "[0,8]") + "," + entry("z", "\"U8\"", "[0]", "[4,4]"),
                  std::string(8, 'x')),
      kDataLoss, path_, {"tensor \"z\"", "overlap tensor \"a\""}));
}

TEST_F(SafetensorsReject, HolesTrailingBytesAndShortFiles) {  // item 13
  EXPECT_TRUE(failed_with(open_header(entry("a", "\"U8\"", "[4]", "[0,4]") + "," +
                                          entry("b", "\"U8\"", "[4]", "[8,12]"),
                                      std::string(12, 'x')),
                          kDataLoss, path_,
                          {"tensor \"b\"", "hole of 4 bytes after tensor \"a\""}));
  EXPECT_TRUE(failed_with(open_header(entry("a", "\"U8\"", "[4]", "[4,8]"), std::string(8, 'x')),
                          kDataLoss, path_, {"tensor \"a\"", "hole of 4 bytes at the start"}));
  EXPECT_TRUE(failed_with(open_header(entry("a", "\"U8\"", "[4]", "[0,4]"), std::string(9, 'x')),
                          kDataLoss, path_, {"5 trailing bytes", "tensor \"a\""}));
  EXPECT_TRUE(
      failed_with(open_bytes(image("{}", "x")), kDataLoss, path_, {"1 bytes", "no tensors"}));
  EXPECT_TRUE(failed_with(open_header(entry("a", "\"U8\"", "[8]", "[0,8]"), "abcd"), kDataLoss,
                          path_, {"tensor \"a\"", "[0, 8]", "past the end", "holds 4 bytes"}));
}

TEST_F(SafetensorsReject, TruncatedInsideLastTensor) {  // item 15
  std::vector<float> a(16, 1.0f), b(64, 2.0f);
  ASSERT_TRUE(write_safetensors(path_,
                                {{"a", DType::kF32, {16}, a.data(), 64},
                                 {"layers.1.b", DType::kF32, {8, 8}, b.data(), 256}},
                                {})
                  .ok());
  std::string bytes = testing_io::read_bytes(path_);
  bytes.resize(bytes.size() - 128);
  EXPECT_TRUE(failed_with(open_bytes(bytes), kDataLoss, path_,
                          {"tensor \"layers.1.b\"", "[64, 320]", "past the end", "truncated"}));
}

TEST_F(SafetensorsReject, NotARegularFileOrMissing) {
  EXPECT_TRUE(failed_with(SafetensorsFile::open(dir_.path()), StatusCode::kIoError, dir_.path(),
                          {"not a regular file"}));
  const std::string fifo = dir_.file("fifo.safetensors");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_TRUE(failed_with(SafetensorsFile::open(fifo), StatusCode::kIoError, fifo,
                          {"not a regular file"}));  // and does not block waiting for a writer
  const std::string missing = dir_.file("missing.safetensors");
  EXPECT_TRUE(
      failed_with(SafetensorsFile::open(missing), StatusCode::kNotFound, missing, {"cannot open"}));
}

TEST_F(SafetensorsReject, HostileNamesCannotFloodOrSplitTheMessage) {
  std::string name(10'000, 'n');
  name[5] = '\n';  // JSON allows only the escaped form; the decoded name holds a real newline
  name.replace(5, 1, "\\n");
  Result<SafetensorsFile> r = open_header(entry(name, "\"F7\"", "[1]", "[0,1]"), "a");
  EXPECT_TRUE(failed_with(r, kDataLoss, path_, {"nnnnn\\x0a", "(10000 bytes)", "F7"}));
  EXPECT_LT(r.status().message().size(), 600u);

  Result<SafetensorsFile> num =
      open_header(entry("s", "\"U8\"", "[1." + std::string(10'000, '0') + "]", "[0,1]"), "a");
  EXPECT_TRUE(failed_with(num, kDataLoss, path_, {"tensor \"s\"", "shape entry 0", "(got 1.000"}));
  EXPECT_LT(num.status().message().size(), 300u);

  Result<SafetensorsFile> unterminated = open_bytes(image("{\"" + std::string(10'000, 'x')));
  EXPECT_TRUE(failed_with(unterminated, kDataLoss, path_, {"not valid UTF-8 JSON"}));
  EXPECT_LT(unterminated.status().message().size(), 600u);
}

}  // namespace
}  // namespace mla
