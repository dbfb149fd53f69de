// tiktoken models (tokenizer/tiktoken.h): a small ranks file written here, with tokens chosen so
// that naive conversions to merges go wrong, encodes exactly as tiktoken's own merge loop
// (reimplemented below, straight from its definition) on random text; Kimi's split pattern
// compiles and cuts as tiktoken does; bad files give errors naming file and line.
#include "tokenizer/tiktoken.h"

#include <gtest/gtest.h>

#include <climits>
#include <filesystem>
#include <fstream>
#include <map>

#include <unistd.h>

#include "core/rng.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/regex.h"
#include "tokenizer/tokenizer_config.h"

namespace mla::tok {
namespace {

std::string b64(std::string_view raw) {
  static constexpr char kA[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < raw.size(); i += 3) {
    const size_t n = std::min<size_t>(3, raw.size() - i);
    uint32_t v = 0;
    for (size_t k = 0; k < 3; ++k) v = (v << 8) | (k < n ? uint8_t(raw[i + k]) : 0u);
    for (size_t k = 0; k < 4; ++k) out += k <= n ? kA[(v >> (18 - 6 * k)) & 63] : '=';
  }
  return out;
}

// The 256 bytes at ranks 0..255, then `extra` in order. The extra tokens:
//   "xx" < "qxxx" < "qx" < "xxx" < "xqqq": tiktoken builds "xxx" as "xx" + "x" (its first split
//     into two tokens is "x" + "xx"); "xxxq" → "xxx", "q".
//   "xqj", " xqj": nothing smaller builds them; only a piece that is the whole token gives them.
//   "ab" < "bc" < "abc" and "cb" < "ba" < "bcb": ordinary chains, and rivals of different ranks.
const std::vector<std::string> kExtra = {"xx",   "qxxx", "qx",  "xxx",  "xqqq", "xqj",
                                         " xqj", "ab",   "bc",  "abc",  "cb",   "ba",
                                         "bcb",  "aa",   "aaa", "aaaa", " a",   " ab"};

std::string ranks_text() {
  std::string s;
  for (int b = 0; b < 256; ++b) s += b64(std::string(1, char(b))) + " " + std::to_string(b) + "\n";
  for (size_t i = 0; i < kExtra.size(); ++i)
    s += b64(kExtra[i]) + " " + std::to_string(256 + i) + "\n";
  return s;
}

// tiktoken's encoding of one piece, from its definition: the whole piece when it is a token,
// else from single bytes merge the leftmost adjacent pair whose concatenation has the lowest rank.
std::vector<int32_t> reference_piece(const std::map<std::string, int32_t>& ranks,
                                     const std::string& piece) {
  if (auto it = ranks.find(piece); it != ranks.end()) return {it->second};
  std::vector<std::string> parts;
  for (char c : piece) parts.emplace_back(1, c);
  for (;;) {
    int32_t best = INT32_MAX;
    size_t at = 0;
    for (size_t i = 0; i + 1 < parts.size(); ++i)
      if (auto it = ranks.find(parts[i] + parts[i + 1]); it != ranks.end() && it->second < best)
        best = it->second, at = i;
    if (best == INT32_MAX) break;
    parts[at] += parts[at + 1];
    parts.erase(parts.begin() + ptrdiff_t(at) + 1);
  }
  std::vector<int32_t> ids;
  for (const std::string& p : parts) ids.push_back(ranks.at(p));
  return ids;
}

// Runs of [a-z], of spaces + letters, and of anything else: simple enough to cut by hand below.
constexpr const char* kSimplePattern = " ?[a-z]+|[^a-z ]+| ";

std::vector<std::string> simple_pieces(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    size_t j = i;
    const auto letter = [&](size_t k) { return k < s.size() && s[k] >= 'a' && s[k] <= 'z'; };
    if (letter(i) || (s[i] == ' ' && letter(i + 1))) {
      j = i + 1;
      while (letter(j)) ++j;
    } else if (s[i] == ' ') {
      j = i + 1;
    } else {
      while (j < s.size() && !letter(j) && s[j] != ' ') ++j;
    }
    out.push_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

Tokenizer build(const nlohmann::json& j) {
  Result<Tokenizer> t = Tokenizer::from_json_object(j, "test.tiktoken");
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return std::move(t.value());
}

TEST(Tiktoken, MergesAreTheLastSplitTiktokenMakes) {
  const auto ranks = parse_tiktoken_ranks(ranks_text(), "t.model").value();
  std::map<std::string, std::string> made;  // token → left part of its merge
  for (const auto& [l, r] : tiktoken_merges(ranks)) made[l + r] = l;
  EXPECT_EQ(made.at("xxx"), "xx");  // not the first split "x" + "xx"
  EXPECT_EQ(made.at("abc"), "ab");
  EXPECT_EQ(made.at("bcb"), "bc");
  EXPECT_EQ(made.at("aaaa"), "aa");
  EXPECT_FALSE(made.contains("xqj"));  // unbuildable: taken whole only
  EXPECT_FALSE(made.contains(" xqj"));
}

TEST(Tiktoken, SameIdsAsTiktokensLoopOnRandomText) {
  const auto ranks = parse_tiktoken_ranks(ranks_text(), "t.model").value();
  std::map<std::string, int32_t> by_bytes;
  for (const RankedToken& t : ranks) by_bytes[t.bytes] = t.rank;
  const Tokenizer t = build(tiktoken_tokenizer_json(ranks, kSimplePattern, {}));
  Rng rng(7);
  const std::string alphabet = "xqjabc  .";
  std::vector<std::string> texts = {"xxxq", "xqj", " xqj", "1xqj", "xqjxqj", "abcbcb", "aaaaaaa"};
  for (int i = 0; i < 3000; ++i) {
    std::string s;
    for (uint64_t n = 1 + rng.below(12); n > 0; --n) s += alphabet[rng.below(alphabet.size())];
    texts.push_back(s);
  }
  for (const std::string& text : texts) {
    std::vector<int32_t> want;
    for (const std::string& p : simple_pieces(text)) {
      const std::vector<int32_t> ids = reference_piece(by_bytes, p);
      want.insert(want.end(), ids.begin(), ids.end());
    }
    EXPECT_EQ(t.encode(text).value(), want) << text;
    EXPECT_EQ(t.decode(want).value(), text);
  }
  EXPECT_EQ(t.encode("xxxq").value(), (std::vector<int32_t>{256 + 3, 'q'}));
  EXPECT_EQ(t.encode(" xqj").value(), (std::vector<int32_t>{256 + 6}));
}

// The check above is not vacuous: merges made from each token's first split into two tokens, or
// no whole-piece shortcut, give other ids on the same inputs.
TEST(Tiktoken, NaiveConversionsDiffer) {
  const auto ranks = parse_tiktoken_ranks(ranks_text(), "t.model").value();
  nlohmann::json j = tiktoken_tokenizer_json(ranks, kSimplePattern, {});
  nlohmann::json first = nlohmann::json::array();
  std::map<std::string, int32_t> by_bytes;
  for (const RankedToken& t : ranks) by_bytes[t.bytes] = t.rank;
  for (const std::string& tok : kExtra)
    for (size_t i = 1; i < tok.size(); ++i)
      if (by_bytes.contains(tok.substr(0, i)) && by_bytes.contains(tok.substr(i))) {
        first.push_back(
            {bytes_to_token_text(tok.substr(0, i)), bytes_to_token_text(tok.substr(i))});
        break;
      }
  nlohmann::json naive = j;
  naive["model"]["merges"] = first;
  EXPECT_NE(build(naive).encode("xxxq").value(), build(j).encode("xxxq").value());
  naive = j;
  naive["model"]["ignore_merges"] = false;
  EXPECT_NE(build(naive).encode("xqj").value(), build(j).encode("xqj").value());
}

TEST(Tiktoken, KimiPatternCutsAsTiktoken) {
  // Pieces as tiktoken's regex cuts them: Han runs alone, words split at a case change, digits
  // in threes, a mark stays with its letter, whitespace before a word keeps one space for it.
  Result<Regex> r = Regex::compile(kimi_pattern(), false, "kimi");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const std::string text = "HelloWORLD's 中文ab 12345 x\u0301y\n\n  end";
  std::vector<Span> spans;
  ASSERT_TRUE(r->find_all(text, &spans).ok());
  std::vector<std::string> pieces;
  for (const Span& s : spans) pieces.push_back(text.substr(s.begin, s.end - s.begin));
  EXPECT_EQ(pieces, (std::vector<std::string>{"Hello", "WORLD's", " ", "中文", "ab", " ", "123",
                                              "45", " x\u0301y", "\n\n", " ", " end"}));
}

void expect_error(const Status& s, std::initializer_list<std::string> words) {
  ASSERT_FALSE(s.ok());
  for (const std::string& w : words)
    EXPECT_NE(s.message().find(w), std::string::npos) << s.message();
}

TEST(Tiktoken, BadFilesNameFileAndLine) {
  const std::string good = ranks_text();
  expect_error(parse_tiktoken_ranks("YQ== 0\n!!!! 1\n", "r.model").status(),
               {"r.model", "line 2", "base64"});
  expect_error(parse_tiktoken_ranks("YQ== 0\nYg== 0\n", "r.model").status(),
               {"line 2", "rank 0", "line 1"});
  expect_error(parse_tiktoken_ranks("YQ== 0\nYQ== 1\n", "r.model").status(),
               {"line 2", "already given on line 1"});
  expect_error(parse_tiktoken_ranks("YQ== x\n", "r.model").status(), {"line 1", "rank"});
  expect_error(parse_tiktoken_ranks("YQ==\n", "r.model").status(), {"line 1", "<rank>"});
  expect_error(parse_tiktoken_ranks("YQ== 0\n", "r.model").status(), {"r.model", "0x00"});
  expect_error(parse_tiktoken_ranks("YR== 0\n", "r.model").status(), {"base64"});  // stray bits
  EXPECT_TRUE(parse_tiktoken_ranks(good, "r.model").ok());
}

class TiktokenDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("mla_tiktoken_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name, std::ios::binary) << text;
  }
  std::string dir() const { return dir_.string(); }
  std::filesystem::path dir_;
};

constexpr const char* kConfig = R"({"bos_token": "[BOS]", "eos_token": "[EOS]",
  "added_tokens_decoder": {"300": {"content": "[BOS]", "special": true},
                           "301": {"content": "[EOS]", "special": true},
                           "302": {"content": "<|im_end|>", "special": true}}})";

TEST_F(TiktokenDir, LoadsWithoutTokenizerJson) {
  write("tiktoken.model", ranks_text());
  write("tokenizer_config.json", kConfig);
  EXPECT_EQ(tokenizer_file(dir()), (dir_ / "tiktoken.model").string());
  Result<LoadedTokenizer> t = load_tokenizer_dir(dir());
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->tokenizer.bos_id(), 300);
  EXPECT_EQ(t->tokenizer.eos_id(), 301);
  EXPECT_TRUE(t->tokenizer.is_special(302));
  // Special-token text is plain text unless asked for.
  EXPECT_EQ(t->tokenizer.encode("<|im_end|>", {.parse_special = true}).value(),
            std::vector<int32_t>{302});
  EXPECT_NE(t->tokenizer.encode("<|im_end|>").value(), std::vector<int32_t>{302});
}

TEST_F(TiktokenDir, ErrorsNameTheFile) {
  EXPECT_FALSE(tokenizer_file(dir()));
  expect_error(load_tokenizer_dir(dir()).status(), {"tokenizer.json"});
  write("tiktoken.model", "YQ== 0\nnot base64! 1\n");
  expect_error(load_tokenizer_dir(dir()).status(), {"tiktoken.model", "line 2"});
  write("tiktoken.model", ranks_text());
  write("tokenizer_config.json", R"({"added_tokens_decoder": {"x": {"content": "a"}}})");
  expect_error(load_tokenizer_dir(dir()).status(),
               {"tokenizer_config.json", "added_tokens_decoder"});
  write("tokenizer_config.json", kConfig);
  write("tokenization_kimi.py", "pat_str = '|'.join([r\"\"\"\\p{N}+\"\"\"])\n");
  expect_error(load_tokenizer_dir(dir()).status(), {"tokenization_kimi.py", "pat_str"});
  std::string py = "pat_str = \"|\".join([\n";
  for (const std::string& p : kimi_pattern_parts()) py += "    r\"\"\"" + p + "\"\"\",\n";
  write("tokenization_kimi.py", py + "])\n");
  EXPECT_TRUE(load_tokenizer_dir(dir()).ok());
}

}  // namespace
}  // namespace mla::tok
