// docs/RELIABILITY.md §Checklist R1-R15, the cases safetensors_reject_test.cc and
// safetensors_test.cc leave out: boundary values of the header length, invalid UTF-8 and non-JSON
// inside values, keys that are duplicates only once their escapes are decoded, containment (not
// just partial overlap), offsets past 2^64, sub-byte sizes, and truncation at every tensor
// boundary. Each bad file must fail at open() with one line naming the file, the tensor or field,
// and the value.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "safetensors_test_util.h"

namespace mla {
namespace {

using testing_io::failed_with;
using testing_io::image;
using testing_io::le64;

constexpr StatusCode kDataLoss = StatusCode::kDataLoss;

using testing_io::entry;
using ReliabilitySafetensors = testing_io::SafetensorsFileTest;

// Item 1: every length below the 8-byte prefix, with the count in the message.
TEST_F(ReliabilitySafetensors, Item1EveryLengthBelowEightBytes) {
  for (size_t n = 0; n < 8; ++n) {
    SCOPED_TRACE(n);
    EXPECT_TRUE(failed_with(open_bytes(std::string(n, '{')), kDataLoss, path_,
                            {"header too small", std::to_string(n) + " bytes"}));
  }
}

// Item 2: the limit itself and one byte past the end of the file, both named; neither may
// allocate N (a 100 MB header on a 10-byte file must come back at once).
TEST_F(ReliabilitySafetensors, Item2HeaderLengthBoundaries) {
  EXPECT_TRUE(failed_with(open_bytes(le64(kSafetensorsMaxHeaderBytes) + "{}"), kDataLoss, path_,
                          {"header length 100000000"}));
  EXPECT_TRUE(failed_with(open_bytes(le64(uint64_t{1} << 40) + "{}"), kDataLoss, path_,
                          {"header length 1099511627776"}));
  // N = file size - 8 + 1: one byte short.
  const std::string header = "{}  ";
  EXPECT_TRUE(failed_with(open_bytes(le64(header.size() + 1) + header), kDataLoss, path_,
                          {"header length 5", "past the end"}));
  // Control: N = file size - 8 exactly.
  Result<SafetensorsFile> ok = open_bytes(le64(header.size()) + header);
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(ok->header_size(), header.size());
}

// Item 3: lengths whose N + 8 wraps or exceeds every possible file.
TEST_F(ReliabilitySafetensors, Item3WrappingHeaderLengths) {
  for (uint64_t n : {~uint64_t(0), ~uint64_t(0) - 1, ~uint64_t(0) - 6, uint64_t{1} << 63,
                     (uint64_t{1} << 63) - 1}) {
    SCOPED_TRACE(n);
    EXPECT_TRUE(failed_with(open_bytes(le64(n) + "{}      "), kDataLoss, path_,
                            {"header length " + std::to_string(n)}));
  }
}

// Item 4: invalid UTF-8 in values (not only keys), and texts that are not JSON or not an object.
TEST_F(ReliabilitySafetensors, Item4InvalidUtf8InValuesAndNonJson) {
  EXPECT_TRUE(failed_with(open_header(entry("w", "\"U\xff\"", "[1]", "[0,1]"), "a"), kDataLoss,
                          path_, {"UTF-8"}));
  EXPECT_TRUE(failed_with(open_header(R"("__metadata__":{"k":"v)"
                                      "\x80"
                                      R"("},)" +
                                          entry("w", "\"U8\"", "[1]", "[0,1]"),
                                      "a"),
                          kDataLoss, path_, {"UTF-8"}));
  // A lone continuation byte, a truncated 3-byte sequence and a code point past U+10FFFF.
  for (std::string bad : {"\x80", "\xe2\x82", "\xf4\x90\x80\x80"}) {
    SCOPED_TRACE(testing::PrintToString(bad));
    EXPECT_TRUE(
        failed_with(open_bytes(image("{\"" + bad + "\":{}}")), kDataLoss, path_, {"UTF-8"}));
  }
  // Not JSON: leading zeros, NaN, single quotes, a trailing comma, an unescaped control byte.
  for (std::string body :
       {entry("w", "\"U8\"", "[01]", "[0,1]"), entry("w", "\"U8\"", "[NaN]", "[0,1]"),
        entry("w", "'U8'", "[1]", "[0,1]"), entry("w", "\"U8\"", "[1,]", "[0,1]"),
        entry("w\t", "\"U8\"", "[1]", "[0,1]")}) {
    SCOPED_TRACE(body);
    EXPECT_TRUE(failed_with(open_header(body, "a"), kDataLoss, path_, {"not valid"}));
  }
  // Top level not an object.
  for (std::string_view top : {"null", "true", "1", "[{}]"}) {
    SCOPED_TRACE(top);
    EXPECT_TRUE(failed_with(open_bytes(image(top)), kDataLoss, path_, {"does not start with '{'"}));
  }
}

// Item 5: a writer that pads with NUL instead of spaces, on an otherwise valid file with data.
TEST_F(ReliabilitySafetensors, Item5NulPaddedHeaderWithTensors) {
  const std::string json = "{" + entry("w", "\"U8\"", "[2]", "[0,2]") + "}";
  std::string padded = json;
  while (padded.size() % 8 != 0) padded += '\0';
  if (padded.size() == json.size()) padded += std::string(8, '\0');
  EXPECT_TRUE(failed_with(open_bytes(image(padded, "ab")), kDataLoss, path_,
                          {"NUL byte at offset " + std::to_string(json.size())}));
  // Control: the same header padded with spaces loads.
  std::string spaced = json + std::string(padded.size() - json.size(), ' ');
  Result<SafetensorsFile> ok = open_bytes(image(spaced, "ab"));
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  ASSERT_NE(ok->find("w"), nullptr);
  EXPECT_EQ(std::memcmp(ok->find("w")->data, "ab", 2), 0);
}

// Item 6: names that differ only in their JSON escapes are the same tensor.
TEST_F(ReliabilitySafetensors, Item6DuplicateAfterEscapesAreDecoded) {
  EXPECT_TRUE(failed_with(open_header(entry("w", "\"U8\"", "[1]", "[0,1]") + "," +
                                          entry("\\u0077", "\"U8\"", "[1]", "[1,2]"),
                                      "ab"),
                          kDataLoss, path_, {"tensor \"w\"", "twice"}));
  EXPECT_TRUE(failed_with(open_header(entry("a/b", "\"U8\"", "[1]", "[0,1]") + "," +
                                          entry("a\\/b", "\"U8\"", "[1]", "[1,2]"),
                                      "ab"),
                          kDataLoss, path_, {"tensor \"a/b\"", "twice"}));
  // Duplicate shape and data_offsets fields, as dtype is covered elsewhere.
  EXPECT_TRUE(failed_with(
      open_header(R"("w":{"dtype":"U8","shape":[1],"shape":[1],"data_offsets":[0,1]})", "a"),
      kDataLoss, path_, {"tensor \"w\"", "shape", "twice"}));
  EXPECT_TRUE(failed_with(
      open_header(R"("w":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"data_offsets":[0,1]})",
                  "a"),
      kDataLoss, path_, {"tensor \"w\"", "data_offsets", "twice"}));
}

// Item 7: a boolean metadata value.
TEST_F(ReliabilitySafetensors, Item7BooleanMetadataValue) {
  EXPECT_TRUE(failed_with(
      open_header(R"("__metadata__":{"format":true},)" + entry("w", "\"U8\"", "[1]", "[0,1]"), "a"),
      kDataLoss, path_, {"__metadata__", "\"format\"", "not a string", "true"}));
}

// Item 8: dtype spellings that are close to real ones, and sub-byte sizes.
TEST_F(ReliabilitySafetensors, Item8DtypeSpellingsAndSubByteSizes) {
  for (std::string_view d : {"", "BF16 ", "bf16", "F8_E4M3FN", "FLOAT32", "I128"}) {
    SCOPED_TRACE(d);
    Result<SafetensorsFile> r =
        open_header(entry("w", "\"" + std::string(d) + "\"", "[1]", "[0,1]"), "a");
    EXPECT_TRUE(
        failed_with(r, kDataLoss, path_,
                    {"tensor \"w\"", "dtype \"" + std::string(d) + "\"", "not a safetensors"}));
  }
  // One FP4 value is half a byte; [1, 3] is 12 bits; [2, 3] is 3 bytes and valid.
  EXPECT_TRUE(failed_with(open_header(entry("q", "\"F4\"", "[1]", "[0,1]"), "a"), kDataLoss, path_,
                          {"tensor \"q\"", "shape [1] of F4", "4 bits"}));
  EXPECT_TRUE(failed_with(open_header(entry("q", "\"F4\"", "[1,3]", "[0,2]"), "ab"), kDataLoss,
                          path_, {"tensor \"q\"", "shape [1, 3] of F4", "12 bits"}));
  Result<SafetensorsFile> ok = open_header(entry("q", "\"F4\"", "[2,3]", "[0,3]"), "abc");
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(ok->find("q")->byte_size, 3u);
  EXPECT_EQ(ok->find("q")->numel, 6);
}

// Item 9: a negative zero and a negative entry past the first, and an overflowing product that
// only overflows at the last dimension.
TEST_F(ReliabilitySafetensors, Item9MoreShapeEntries) {
  auto shape = [&](std::string_view s) {
    return open_header(entry("s", "\"U8\"", s, "[0,1]"), "a");
  };
  EXPECT_TRUE(
      failed_with(shape("[1,1,-5]"), kDataLoss, path_, {"tensor \"s\"", "shape entry 2", "-5"}));
  EXPECT_TRUE(failed_with(shape("[-9223372036854775808]"), kDataLoss, path_,
                          {"tensor \"s\"", "shape entry 0", "-9223372036854775808"}));
  EXPECT_TRUE(failed_with(shape("[1,2.5e0]"), kDataLoss, path_, {"tensor \"s\"", "shape entry 1"}));
  // 2^31 * 2^31 * 2 = 2^63: one past INT64_MAX elements.
  EXPECT_TRUE(failed_with(open_header(entry("o", "\"U8\"", "[2147483648,2147483648,2]", "[0,0]")),
                          kDataLoss, path_, {"tensor \"o\"", "more than 2^63-1 elements"}));
  // 2^62 BF16 elements are 2^63 bytes: the element count fits, the byte size does not fit int64.
  Result<SafetensorsFile> big =
      open_header(entry("o", "\"BF16\"", "[4611686018427387904]", "[0,0]"));
  EXPECT_TRUE(failed_with(big, kDataLoss, path_, {"tensor \"o\""}));
}

// Item 10: offsets at and past 2^64, null entries, and begin > end in the second tensor.
TEST_F(ReliabilitySafetensors, Item10OffsetsPastTwoToTheSixtyFour) {
  auto offs = [&](std::string_view o) { return open_header(entry("t", "\"U8\"", "[1]", o), "a"); };
  EXPECT_TRUE(failed_with(offs("[0,18446744073709551616]"), kDataLoss, path_,
                          {"tensor \"t\"", "data_offsets entry 1", "18446744073709551616"}));
  EXPECT_TRUE(failed_with(offs("[18446744073709551615,18446744073709551615]"), kDataLoss, path_,
                          {"tensor \"t\""}));
  EXPECT_TRUE(failed_with(offs("[0,18446744073709551615]"), kDataLoss, path_, {"tensor \"t\""}));
  EXPECT_TRUE(failed_with(offs("[null,1]"), kDataLoss, path_, {"tensor \"t\"", "data_offsets"}));
  EXPECT_TRUE(failed_with(offs("[0,-0]"), kDataLoss, path_, {"tensor \"t\"", "data_offsets"}));
  EXPECT_TRUE(failed_with(
      open_header(entry("a", "\"U8\"", "[1]", "[0,1]") + "," + entry("b", "\"U8\"", "[1]", "[3,2]"),
                  "abc"),
      kDataLoss, path_, {"tensor \"b\"", "[3, 2]", "begin after end"}));
}

// Item 11: mismatches next to the valid rank-0 and [0]-shape controls in the same file.
TEST_F(ReliabilitySafetensors, Item11SizeMismatchBesideValidControls) {
  const std::string controls =
      entry("scalar", "\"F32\"", "[]", "[0,4]") + "," + entry("empty", "\"F32\"", "[0]", "[4,4]");
  Result<SafetensorsFile> ok = open_header(controls, "abcd");
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(ok->find("scalar")->numel, 1);
  EXPECT_EQ(ok->find("empty")->numel, 0);

  EXPECT_TRUE(failed_with(
      open_header(controls + "," + entry("bad", "\"F32\"", "[2]", "[4,8]"), "abcdefgh"), kDataLoss,
      path_, {"tensor \"bad\"", "hold 4 bytes but shape [2] of F32 needs 8"}));
  EXPECT_TRUE(failed_with(
      open_header(controls + "," + entry("bad", "\"F32\"", "[1]", "[4,12]"), "abcdefghijkl"),
      kDataLoss, path_, {"tensor \"bad\"", "hold 8 bytes but shape [1] of F32 needs 4"}));
  EXPECT_TRUE(failed_with(open_header(entry("q", "\"F4\"", "[4]", "[0,1]"), "a"), kDataLoss, path_,
                          {"tensor \"q\"", "hold 1 bytes but shape [4] of F4 needs 2"}));
}

// Item 12: one tensor wholly inside another, and overlaps listed in either order.
TEST_F(ReliabilitySafetensors, Item12ContainmentAndOrder) {
  EXPECT_TRUE(failed_with(open_header(entry("outer", "\"U8\"", "[8]", "[0,8]") + "," +
                                          entry("inner", "\"U8\"", "[2]", "[2,4]"),
                                      std::string(8, 'x')),
                          kDataLoss, path_, {"overlap", "\"outer\"", "\"inner\""}));
  EXPECT_TRUE(failed_with(open_header(entry("late", "\"U8\"", "[4]", "[4,8]") + "," +
                                          entry("early", "\"U8\"", "[6]", "[0,6]"),
                                      std::string(8, 'x')),
                          kDataLoss, path_, {"overlap", "\"early\"", "\"late\""}));
  // k_proj and v_proj aliasing the same bytes with the same shape.
  EXPECT_TRUE(failed_with(open_header(entry("k_proj", "\"BF16\"", "[2,2]", "[0,8]") + "," +
                                          entry("v_proj", "\"BF16\"", "[2,2]", "[0,8]"),
                                      std::string(8, 'x')),
                          kDataLoss, path_, {"overlap", "\"k_proj\"", "\"v_proj\""}));
}

// Item 13: holes found after sorting tensors listed out of order, a gap before the last tensor,
// and a file one byte short of the last offset.
TEST_F(ReliabilitySafetensors, Item13HolesAndShortFilesOutOfOrder) {
  EXPECT_TRUE(failed_with(open_header(entry("c", "\"U8\"", "[2]", "[6,8]") + "," +
                                          entry("a", "\"U8\"", "[2]", "[0,2]") + "," +
                                          entry("b", "\"U8\"", "[2]", "[2,4]"),
                                      std::string(8, 'x')),
                          kDataLoss, path_,
                          {"tensor \"c\"", "hole of 2 bytes after tensor \"b\""}));
  EXPECT_TRUE(failed_with(
      open_header(entry("a", "\"U8\"", "[2]", "[0,2]") + "," + entry("b", "\"U8\"", "[2]", "[2,4]"),
                  std::string(3, 'x')),
      kDataLoss, path_, {"tensor \"b\"", "[2, 4]", "past the end"}));
  // Trailing bytes after zero-size tensors only.
  EXPECT_TRUE(failed_with(open_header(entry("z", "\"U8\"", "[0]", "[0,0]"), "xy"), kDataLoss, path_,
                          {"2 trailing bytes"}));
}

// Item 14: a writer file shifted so the data section is odd-aligned still reads back exactly.
TEST_F(ReliabilitySafetensors, Item14ShiftedWriterFileLoads) {
  std::vector<double> d = {1.0, -2.5, 1e-300};
  std::vector<int64_t> i = {-1, int64_t{1} << 40};
  ASSERT_TRUE(
      write_safetensors(
          path_, {{"d", DType::kF64, {3}, d.data(), 24}, {"i", DType::kI64, {2}, i.data(), 16}}, {})
          .ok());
  std::string bytes = testing_io::read_bytes(path_);
  const uint64_t n = bytes.size() - 40 - 8;
  // Insert three spaces at the end of the header: N + 3, data section at 8 + N + 3 (odd).
  bytes.insert(8 + n, "   ");
  bytes.replace(0, 8, le64(n + 3));
  Result<SafetensorsFile> f = open_bytes(bytes);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->data_offset() % 2, 1u);
  std::vector<double> d2(3);
  std::vector<int64_t> i2(2);
  std::memcpy(d2.data(), f->find("d")->data, 24);
  std::memcpy(i2.data(), f->find("i")->data, 16);
  EXPECT_EQ(d2, d);
  EXPECT_EQ(i2, i);
}

// Item 15: a writer file cut at every byte from the start of the data section to one byte short
// of the end: always an error at open naming the file, never a fault.
TEST_F(ReliabilitySafetensors, Item15CutAtEveryByteOfTheData) {
  std::vector<uint8_t> a(16, 1), b(24, 2), c(8, 3);
  ASSERT_TRUE(write_safetensors(path_,
                                {{"a", DType::kU8, {16}, a.data(), 16},
                                 {"b", DType::kBF16, {3, 4}, b.data(), 24},
                                 {"c", DType::kF32, {2}, c.data(), 8}},
                                {})
                  .ok());
  const std::string full = testing_io::read_bytes(path_);
  const size_t data_start = full.size() - 48;
  for (size_t len = data_start; len < full.size(); ++len) {
    SCOPED_TRACE(len);
    Result<SafetensorsFile> r = open_bytes(std::string_view(full).substr(0, len));
    const char* victim = len < data_start + 16   ? "\"a\""
                         : len < data_start + 40 ? "\"b\""
                                                 : "\"c\"";
    EXPECT_TRUE(failed_with(r, kDataLoss, path_, {"past the end", victim}));
  }
  // The header cut short as well.
  for (size_t len : {size_t(9), data_start / 2, data_start - 1}) {
    SCOPED_TRACE(len);
    EXPECT_TRUE(failed_with(open_bytes(std::string_view(full).substr(0, len)), kDataLoss, path_,
                            {"header length"}));
  }
}

}  // namespace
}  // namespace mla
