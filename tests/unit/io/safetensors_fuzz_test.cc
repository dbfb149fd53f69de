// Seeded mutation loop over small valid safetensors files: every mutant must either open with a
// self-consistent tensor table or fail with a message; never crash (run under ASan/UBSan in CI).
// Each mutant is also parsed from an exactly-sized heap copy so that ASan sees any over-read,
// which it cannot inside an mmap.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/rng.h"
#include "io/safetensors.h"
#include "io/safetensors_header.h"
#include "safetensors_test_util.h"

namespace mla {
namespace {

using testing_io::le64;

// Bytes that steer a JSON lexer into its other branches.
constexpr char kInteresting[] = {'{', '}', '[', ']',  '"',  ',', ':',        '0',        '9', '-',
                                 '.', 'e', ' ', '\0', '\\', 'u', char(0xff), char(0xc3), 'F', '1'};

std::string mutate(const std::string& base, Rng& rng) {
  std::string s = base;
  if (s.empty()) return s;
  const uint64_t n = s.size() >= 8 ? uint64_t(s[0] & 0xff) | uint64_t(s[1] & 0xff) << 8 : 0;
  switch (rng.below(8)) {
    case 0: {  // flip bits in 1-4 random bytes
      for (uint64_t k = 1 + rng.below(4); k > 0; --k)
        s[rng.below(s.size())] ^= char(1 + rng.below(255));
      break;
    }
    case 1: {  // a structural byte anywhere in the header
      const uint64_t at = 8 + rng.below(std::max<uint64_t>(n, 1));
      if (at < s.size()) s[at] = kInteresting[rng.below(sizeof(kInteresting))];
      break;
    }
    case 2:  // truncate
      s.resize(rng.below(s.size() + 1));
      break;
    case 3: {  // a new length prefix: near the truth, at the edges, or anything
      const uint64_t choices[] = {0,
                                  n + 1 + rng.below(8),
                                  n - 1 - rng.below(std::min<uint64_t>(n, 8)),
                                  s.size() - 8,
                                  s.size() - 7,
                                  ~uint64_t(0),
                                  ~uint64_t(0) - 7,
                                  100'000'001,
                                  rng.next_u64(),
                                  rng.below(s.size())};
      s.replace(0, 8, le64(choices[rng.below(std::size(choices))]));
      break;
    }
    case 4:  // trailing bytes
      s.append(1 + rng.below(16), char(rng.below(256)));
      break;
    case 5: {  // insert or delete one header byte, keeping the prefix
      const uint64_t at = 8 + rng.below(std::max<uint64_t>(n, 1));
      if (at >= s.size()) break;
      if (rng.below(2))
        s.insert(s.begin() + at, kInteresting[rng.below(sizeof(kInteresting))]);
      else
        s.erase(s.begin() + at);
      break;
    }
    case 6: {  // change one digit in the header: offsets and shapes stay syntactically valid
      std::vector<size_t> digits;
      for (size_t i = 8; i < std::min<uint64_t>(8 + n, s.size()); ++i)
        if (s[i] >= '0' && s[i] <= '9') digits.push_back(i);
      if (!digits.empty()) s[digits[rng.below(digits.size())]] = char('0' + rng.below(10));
      break;
    }
    default: {  // two mutations at once
      s = mutate(mutate(base, rng), rng);
      break;
    }
  }
  return s;
}

// The invariants open() promises for a file it accepts.
void expect_consistent(const SafetensorsFile& f) {
  uint64_t end = 0;
  uint64_t sum = 0;
  for (const TensorInfo& t : f.tensors()) {
    ASSERT_EQ(t.byte_offset, end) << t.name;
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      ASSERT_GE(d, 0) << t.name;
      numel *= uint64_t(d);  // cannot overflow: the byte size below is bounded by the file
    }
    ASSERT_EQ(uint64_t(t.numel), numel) << t.name;
    ASSERT_EQ(numel * uint64_t(dtype_bits(t.dtype)), t.byte_size * 8) << t.name;
    ASSERT_EQ(f.find(t.name), &t);
    for (uint64_t i = 0; i < t.byte_size; ++i) sum += t.data[i];  // must not fault
    end = t.byte_offset + t.byte_size;
  }
  ASSERT_EQ(f.data_offset() + end, f.file_size());
  (void)sum;
}

std::string base_file(const std::string& path, bool aligned) {
  std::vector<uint8_t> a(24), b(6), c(4);
  for (size_t i = 0; i < a.size(); ++i) a[i] = uint8_t(i * 7);
  if (aligned) {
    Status s = write_safetensors(path,
                                 {{"a", DType::kF32, {2, 3}, a.data(), 24},
                                  {"b.w", DType::kBF16, {3}, b.data(), 6},
                                  {"z", DType::kI8, {0}, nullptr, 0},
                                  {"c", DType::kU8, {2, 2}, c.data(), 4}},
                                 {{"format", "pt"}});
    EXPECT_TRUE(s.ok()) << s.to_string();
    return testing_io::read_bytes(path);
  }
  return testing_io::image(
      R"({"__metadata__":{"k":"v"},"x":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},)"
      R"("y":{"dtype":"F4","shape":[2,2],"data_offsets":[4,6]},)"
      R"("e":{"dtype":"I64","shape":[],"data_offsets":[6,14]}})",
      "abcdefghijklmn");
}

TEST(SafetensorsFuzz, MutantsOpenConsistentlyOrFailCleanly) {
  testing_io::TempDir dir;
  const std::string path = dir.file("fuzz.safetensors");
  const std::string bases[] = {base_file(path, true), base_file(path, false)};
  for (const std::string& base : bases) {
    testing_io::write_bytes(path, base);
    Result<SafetensorsFile> f = SafetensorsFile::open(path);
    ASSERT_TRUE(f.ok()) << "the unmutated base must be valid: " << f.status().to_string();
    ASSERT_EQ(f->tensors().size(), &base == &bases[0] ? 4u : 3u);
  }
  Rng rng(0x5afe7e45);
  int opened = 0, rejected = 0;
  for (int iter = 0; iter < 2000; ++iter) {
    const std::string bytes = mutate(bases[iter % 2], rng);
    SCOPED_TRACE("iteration " + std::to_string(iter));

    std::vector<uint8_t> heap(bytes.begin(), bytes.end());  // exact size: ASan guards the end
    Result<io_detail::ParsedSafetensors> in_memory =
        io_detail::parse_safetensors(path, heap.data(), heap.size());

    testing_io::write_bytes(path, bytes);
    Result<SafetensorsFile> f = SafetensorsFile::open(path);
    ASSERT_EQ(f.ok(), in_memory.ok())
        << f.status().to_string() << " vs " << in_memory.status().to_string();
    if (f.ok()) {
      ++opened;
      expect_consistent(*f);
      ASSERT_EQ(f->tensors().size(), in_memory->tensors.size());
    } else {
      ++rejected;
      ASSERT_EQ(f.status().message(), in_memory.status().message());
      ASSERT_NE(f.status().message().find(path), std::string::npos) << f.status().message();
      ASSERT_EQ(f.status().message().find('\n'), std::string::npos) << f.status().message();
    }
  }
  // Mutations of the data section and harmless whitespace keep a file valid; most others do not.
  EXPECT_GT(opened, 10);
  EXPECT_GT(rejected, 1000);
  std::printf("safetensors fuzz: %d mutants opened, %d rejected\n", opened, rejected);
}

}  // namespace
}  // namespace mla
