// Encodes and decodes the golden corpora written by tests/e2e/tokenizer_oracle.py with Hugging
// Face `tokenizers` (the oracle): the real DeepSeek-V3 tokenizer and two small trained ones. Ids
// must be identical; decodes byte-identical; streaming must add up to the plain decode.
#include <string>
#include <vector>

#include "tokenizer/stream_decoder.h"
#include "tokenizer/utf8.h"
#include "tokenizer_test_util.h"

namespace mla::tok {
namespace {

using testing_util::load_golden;

std::vector<int32_t> ids_of(const Json& j) {
  return j.get<std::vector<int32_t>>();
}

// Checks every case and decode in a golden file against `t`; returns the number of cases.
size_t check_golden(const Tokenizer& t, const Json& golden, bool round_trip) {
  size_t n = 0;
  for (const Json& c : golden["cases"]) {
    const std::string& text = c["text"].get_ref<const std::string&>();
    Result<std::vector<int32_t>> plain = t.encode(text);
    EXPECT_TRUE(plain.ok()) << plain.status().to_string();
    if (!plain.ok()) continue;
    EXPECT_EQ(*plain, ids_of(c["ids"])) << "text: " << text;
    EncodeOptions special;
    special.parse_special = true;
    Result<std::vector<int32_t>> parsed = t.encode(text, special);
    EXPECT_TRUE(parsed.ok());
    if (parsed.ok()) {
      EXPECT_EQ(*parsed, ids_of(c["ids_special"])) << "text: " << text;
    }
    if (round_trip) {
      Result<std::string> back = t.decode(*plain);
      EXPECT_TRUE(back.ok());
      if (back.ok()) {
        EXPECT_EQ(*back, text);
      }
    }
    ++n;
  }
  for (const Json& d : golden["decode"]) {
    const std::vector<int32_t> ids = ids_of(d["ids"]);
    Result<std::string> text = t.decode(ids);
    EXPECT_TRUE(text.ok()) << text.status().to_string();
    if (text.ok()) {
      EXPECT_EQ(*text, d["text"].get<std::string>());
    }
    DecodeOptions skip;
    skip.skip_special = true;
    Result<std::string> skipped = t.decode(ids, skip);
    EXPECT_TRUE(skipped.ok());
    if (skipped.ok()) {
      EXPECT_EQ(*skipped, d["text_skip_special"].get<std::string>());
    }
    StreamDecoder sd(t);
    std::string streamed;
    for (int32_t id : ids) {
      Result<std::string> piece = sd.push(id);
      EXPECT_TRUE(piece.ok());
      if (!piece.ok()) continue;
      EXPECT_EQ(utf8_valid_prefix(*piece), piece->size()) << "a chunk must be complete UTF-8";
      streamed += *piece;
      EXPECT_LE(sd.pending_bytes(), 3u);
    }
    streamed += sd.finish();
    EXPECT_EQ(streamed, d["text"].get<std::string>());
  }
  return n;
}

TEST(TokenizerGolden, DeepSeekV3MatchesHuggingFace) {
  MLA_NEED_V3(t);
  const Json golden = load_golden("deepseek_v3_golden.json");
  EXPECT_GT(check_golden(*t, golden, /*round_trip=*/true), 900u);
}

TEST(TokenizerGolden, TrainedByteLevelMatchesHuggingFace) {
  Result<Tokenizer> t = Tokenizer::from_file(testing_util::data_path("tiny_bytelevel.json"));
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  // add_prefix_space changes the text, so no round trip here.
  EXPECT_GT(check_golden(*t, load_golden("tiny_bytelevel_golden.json"), false), 300u);
}

TEST(TokenizerGolden, TrainedSplitBehavioursMatchHuggingFace) {
  Result<Tokenizer> t = Tokenizer::from_file(testing_util::data_path("tiny_splits.json"));
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  // A Removed split drops text, so no round trip here.
  EXPECT_GT(check_golden(*t, load_golden("tiny_splits_golden.json"), false), 300u);
}

TEST(TokenizerGolden, DeepSeekV3KnownIds) {
  MLA_NEED_V3(t);
  // The worked example of docs/TOKENIZER.md §DeepSeek-V3 tokenizer.json, confirmed by the oracle.
  Result<std::vector<int32_t>> ids = t->encode("Hello! 毕老师！1 + 1 = 2");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{19923, 3, 223, 5464, 5008, 1175, 19, 940, 223, 19, 438, 223,
                                        20}));
  EXPECT_EQ(t->token_to_id("<｜begin▁of▁sentence｜>"), 0);
  EXPECT_EQ(t->token_to_id("<｜end▁of▁sentence｜>"), 1);
  EXPECT_EQ(t->token_to_id("<｜User｜>"), 128803);
  EXPECT_EQ(t->token_to_id("<｜Assistant｜>"), 128804);
  // In V3's file 128798/128799 are placeholders; <think> and </think> exist only in R1's.
  EXPECT_EQ(t->token_to_id("<｜place▁holder▁no▁798｜>"), 128798);
  EXPECT_EQ(t->token_to_id("<｜fim▁hole｜>"), 128800);
  EXPECT_EQ(t->token_to_id("<|EOT|>"), 128805);
  EXPECT_EQ(t->token_to_id("<｜tool▁sep｜>"), 128814);
  EXPECT_EQ(t->id_limit(), 128815);
  EXPECT_EQ(t->model().vocab_size(), 128000u);
  EXPECT_EQ(t->model().merge_count(), 127741u);
  EXPECT_EQ(t->added_tokens().size(), 818u);
}

TEST(TokenizerGolden, TypedSpecialTokenTextStaysText) {
  MLA_NEED_V3(t);
  const std::string text = "<｜User｜>hi<｜begin▁of▁sentence｜>";
  Result<std::vector<int32_t>> plain = t->encode(text);
  ASSERT_TRUE(plain.ok());
  for (int32_t id : *plain) EXPECT_LT(id, 128000) << "control id from plain text";
  EncodeOptions special;
  special.parse_special = true;
  Result<std::vector<int32_t>> parsed = t->encode(text, special);
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->front(), 128803);
  EXPECT_EQ(parsed->back(), 0);
}

}  // namespace
}  // namespace mla::tok
