// make-tiny's tokenizer (tiny/tiny_tokenizer): for every family the written files (tiktoken.model
// for the Kimi families, tokenizer.json for the others) load with the
// project's tokenizer, round-trip arbitrary UTF-8, put BOS / EOS at the config's ids, keep every
// id below vocab_size, and carry a chat template that detect_chat_format recognises; the
// structure matches DeepSeek-V3's tokenizer.json where both have the same part.
#include "tiny/tiny_tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint_test_util.h"
#include "core/rng.h"
#include "tiny/tiny_checkpoint.h"
#include "tokenizer/chat_format.h"
#include "tokenizer/tokenizer_config.h"

namespace mla {
namespace {

using testing_model::read_text;
using testing_model::TempDir;

struct Written {
  ModelConfig config;
  tok::LoadedTokenizer tokenizer;
};

// Writes the family's tiny checkpoint (one layer, one file) and loads its tokenizer directory.
std::optional<Written> write_and_load(const std::string& family, const TempDir& dir) {
  TinyCheckpointOptions o;
  o.family = family;
  o.layers = 1;
  o.shards = 1;
  Result<TinyCheckpointInfo> info = write_tiny_checkpoint(o, dir.path());
  EXPECT_TRUE(info.ok()) << info.status().to_string();
  if (!info.ok()) return std::nullopt;
  // The Kimi families ship their checkpoints' tiktoken.model instead of tokenizer.json.
  const bool kimi = family == "kimi-k2" || family == "moonlight";
  const char* tok_file = kimi ? "tiktoken.model" : "tokenizer.json";
  for (const char* f : {tok_file, "tokenizer_config.json"}) {
    EXPECT_NE(std::find(info->files.begin(), info->files.end(), f), info->files.end()) << f;
    EXPECT_TRUE(std::filesystem::exists(dir.file(f))) << f;
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file(kimi ? "tokenizer.json" : "tiktoken.model")));
  Result<tok::LoadedTokenizer> t = tok::load_tokenizer_dir(dir.path());
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  if (!t.ok()) return std::nullopt;
  return Written{info->config, std::move(*t)};
}

// Random valid UTF-8: code points from every plane (no surrogates), weighted towards ASCII.
std::string random_utf8(Rng& rng, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) {
    const uint64_t kind = rng.below(4);
    uint32_t cp = kind == 0   ? uint32_t(rng.below(0x80))
                  : kind == 1 ? uint32_t(0x80 + rng.below(0x780))
                  : kind == 2 ? uint32_t(0x800 + rng.below(0xF800))
                              : uint32_t(0x10000 + rng.below(0x100000));
    if (cp >= 0xD800 && cp < 0xE000) cp = 0x4E00 + cp % 0x5000;
    if (cp < 0x80) {
      s += char(cp);
    } else if (cp < 0x800) {
      s += char(0xC0 | (cp >> 6)), s += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      s += char(0xE0 | (cp >> 12)), s += char(0x80 | ((cp >> 6) & 0x3F));
      s += char(0x80 | (cp & 0x3F));
    } else {
      s += char(0xF0 | (cp >> 18)), s += char(0x80 | ((cp >> 12) & 0x3F));
      s += char(0x80 | ((cp >> 6) & 0x3F)), s += char(0x80 | (cp & 0x3F));
    }
  }
  return s;
}

class TinyTokenizer : public ::testing::TestWithParam<std::string> {};

TEST_P(TinyTokenizer, LoadsWithTheConfigsIds) {
  TempDir dir;
  std::optional<Written> w = write_and_load(GetParam(), dir);
  ASSERT_TRUE(w);
  const tok::Tokenizer& t = w->tokenizer.tokenizer;
  const ModelConfig& c = w->config;
  ASSERT_EQ(t.bos_id(), std::optional<int32_t>(int32_t(c.bos_token_id)));
  ASSERT_FALSE(c.eos_token_ids.empty());
  EXPECT_EQ(t.eos_id(), std::optional<int32_t>(int32_t(c.eos_token_ids[0])));
  EXPECT_TRUE(t.is_special(*t.bos_id()));
  EXPECT_TRUE(t.is_special(*t.eos_id()));
  EXPECT_TRUE(w->tokenizer.config.add_bos_token);
  // Every id the tokenizer has fits the embedding, and there are no holes below the limit.
  EXPECT_LE(t.id_limit(), c.vocab_size);
  EXPECT_GT(t.id_limit(), 256 + 2);
  for (int32_t id = 0; id < t.id_limit(); ++id) EXPECT_NE(t.token_bytes(id), nullptr) << id;
  for (const tok::AddedToken& a : t.added_tokens()) EXPECT_LT(a.id, c.vocab_size) << a.content;
}

TEST_P(TinyTokenizer, RoundTripsArbitraryText) {
  TempDir dir;
  std::optional<Written> w = write_and_load(GetParam(), dir);
  ASSERT_TRUE(w);
  const tok::Tokenizer& t = w->tokenizer.tokenizer;
  std::vector<std::string> texts = {
      "",
      "Hello, world!",
      "the quick brown fox jumps over the lazy dog",
      " leading space",
      "digits 0 12 123 1234 12345678901",
      "naïve café Straße ½ €5 ¥1000",
      "\x7f\x01\t\r\n\v\f",
      "中文测试，日本語のテキスト、カタカナ、한국어",
      "emoji 😀 👍🏽 👨‍👩‍👧‍👦 🇺🇸",
      "<｜begin▁of▁sentence｜><｜User｜>hi<|im_end|>[BOS]",  // typed by a user: plain text
      "e\u0301 zero\u200bwidth nbsp\u00a0 bom\ufeff line\u2028sep",
      "    \n\n  \t\n"};
  Rng rng(42);
  for (int i = 0; i < 200; ++i) texts.push_back(random_utf8(rng, 1 + int(rng.below(40))));
  for (const std::string& text : texts) {
    Result<std::vector<int32_t>> ids = t.encode(text);
    ASSERT_TRUE(ids.ok()) << ids.status().to_string();
    for (int32_t id : *ids) {
      EXPECT_GE(id, 0);
      EXPECT_LT(id, w->config.vocab_size);
      EXPECT_FALSE(t.is_special(id)) << "plain text never yields a control id";
    }
    Result<std::string> back = t.decode(*ids);
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_EQ(*back, text);
  }
  // The merges apply: " the" and " and" are one token each.
  EXPECT_EQ(t.encode(" the").value(), std::vector<int32_t>{*t.token_to_id("Ġthe")});
  EXPECT_EQ(t.encode(" and").value(), std::vector<int32_t>{*t.token_to_id("Ġand")});
  EXPECT_EQ(t.encode("Hi").value().size(), 2u);
}

TEST_P(TinyTokenizer, ChatTemplateIsTheFamilysFormat) {
  TempDir dir;
  std::optional<Written> w = write_and_load(GetParam(), dir);
  ASSERT_TRUE(w);
  const std::string& family = GetParam();
  const tok::ChatFormat want = family == "v3"          ? tok::ChatFormat::kDeepSeekV3
                               : family == "kimi-k2"   ? tok::ChatFormat::kKimiK2
                               : family == "moonlight" ? tok::ChatFormat::kMoonlight
                               : family == "minicpm3"  ? tok::ChatFormat::kChatMl
                                                       : tok::ChatFormat::kDeepSeekV2;
  Result<tok::ChatFormat> f = tok::detect_chat_format(w->tokenizer.config.chat_template);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(*f, want);
  const tok::Tokenizer& t = w->tokenizer.tokenizer;
  // Every control token the format uses is an added token below vocab_size.
  std::vector<tok::ChatMessage> msgs = {{"system", "Be brief.", {}, "", ""},
                                        {"user", "Hi", {}, "", ""},
                                        {"assistant", "Hello", {}, "", ""}};
  msgs.push_back({"user", "2 + 2?", {}, "", ""});
  Result<std::vector<tok::ChatPart>> parts = tok::render_chat(*f, msgs);
  ASSERT_TRUE(parts.ok()) << parts.status().to_string();
  Result<std::vector<int32_t>> ids = tok::encode_chat(t, *parts);
  ASSERT_TRUE(ids.ok()) << ids.status().to_string();
  for (int32_t id : *ids) EXPECT_LT(id, w->config.vocab_size);
  EXPECT_EQ(t.decode(*ids).value(), tok::chat_text(*parts));
  if (family != "kimi-k2" && family != "moonlight" && family != "minicpm3") {
    EXPECT_EQ(ids->front(), w->config.bos_token_id);  // the DeepSeek formats open with BOS
    // The V3 format, tool calls included, works on every DeepSeek family's tokenizer.
  }
  if (family != "minicpm3") {
    // Tools, tool calls and a forced call work on every family's tokenizer (ChatML has none).
    const tok::ChatFormat tf =
        family == "kimi-k2" || family == "moonlight" ? *f : tok::ChatFormat::kDeepSeekV3;
    tok::ChatMessage call{
        "assistant", std::nullopt, {{"function", "f", "{}", "functions.f:0"}}, "", ""};
    std::vector<tok::ChatMessage> tools = {
        {"user", "x", {}, "", ""}, call, {"tool", "1", {}, "", "functions.f:0"}};
    tok::ChatOptions o;
    o.tools = {R"({"type":"function","function":{"name":"f"}})"};
    o.forced_tool = "f";
    Result<std::vector<tok::ChatPart>> p = tok::render_chat(tf, tools, o);
    ASSERT_TRUE(p.ok());
    EXPECT_TRUE(tok::encode_chat(t, *p).ok()) << tok::encode_chat(t, *p).status().to_string();
  }
  // Added-token text is parsed when asked for, with exactly one BOS.
  const std::string bos = *t.id_to_token(*t.bos_id());
  Result<std::vector<int32_t>> s =
      t.encode(bos + "x", tok::EncodeOptions{.parse_special = true, .add_bos = true});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s, (std::vector<int32_t>{*t.bos_id(), *t.token_to_id("x")}));
}

INSTANTIATE_TEST_SUITE_P(AllFamilies, TinyTokenizer,
                         ::testing::Values("v2-lite", "v2", "v3", "kimi-k2", "moonlight",
                                           "minicpm3"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

TEST(TinyTokenizerFiles, DeterministicAndErrors) {
  TinyCheckpointOptions o;
  o.family = "v3";
  ModelConfig c = parse_model_config(tiny_config_json(o).value(), "tiny").value();
  Result<TinyTokenizerFiles> a = tiny_tokenizer_files("v3", c), b = tiny_tokenizer_files("v3", c);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->tokenizer_json, b->tokenizer_json);
  EXPECT_EQ(a->tokenizer_config_json, b->tokenizer_config_json);
  EXPECT_EQ(tiny_tokenizer_files("v4", c).status().code(), StatusCode::kInvalidArgument);
  ModelConfig bad = c;
  bad.bos_token_id = 5;
  EXPECT_NE(tiny_tokenizer_files("v3", bad).status().message().find("bos_token_id 5"),
            std::string::npos);
  bad = c;
  bad.vocab_size = 300;
  EXPECT_NE(tiny_tokenizer_files("v3", bad).status().message().find("vocab_size 300"),
            std::string::npos);
}

// The parts V3's real tokenizer.json shares with ours are the same JSON: normalizer,
// pre-tokenizer, post-processor, decoder, BOS / EOS / pad and the 256 byte tokens at ids 3..258.
TEST(TinyTokenizerFiles, SameStructureAsDeepSeekV3) {
  // DeepSeek-V3's own file, from the folder MLA_DEEPSEEK_V3_TOKENIZER_DIR names
  // (docs/TOKENIZER.md).
  const char* dir = std::getenv("MLA_DEEPSEEK_V3_TOKENIZER_DIR");
  const std::string v3_path = std::string(dir ? dir : "") + "/tokenizer.json";
  if (!dir || !std::filesystem::exists(v3_path))
    GTEST_SKIP() << "set MLA_DEEPSEEK_V3_TOKENIZER_DIR to DeepSeek-V3's tokenizer folder";
  const nlohmann::json v3 = nlohmann::json::parse(read_text(v3_path));
  TinyCheckpointOptions o;
  o.family = "v3";
  const ModelConfig c = parse_model_config(tiny_config_json(o).value(), "tiny").value();
  const nlohmann::json tiny =
      nlohmann::json::parse(tiny_tokenizer_files("v3", c).value().tokenizer_json);
  for (const char* key : {"normalizer", "pre_tokenizer", "post_processor", "decoder"})
    EXPECT_EQ(tiny[key], v3[key]) << key;
  for (const char* key : {"type", "byte_fallback", "fuse_unk", "unk_token", "dropout"})
    EXPECT_EQ(tiny["model"][key], v3["model"][key]) << key;
  for (int i = 0; i < 3; ++i) EXPECT_EQ(tiny["added_tokens"][i], v3["added_tokens"][i]) << i;
  int bytes = 0;
  for (const auto& [token, id] : tiny["model"]["vocab"].items())
    if (id.get<int>() < 259) {
      EXPECT_EQ(v3["model"]["vocab"].value(token, -1), id.get<int>()) << token;
      ++bytes;
    }
  EXPECT_EQ(bytes, 259);
  // The merges are V3 merges too, in V3's order.
  std::map<std::string, size_t> v3_rank;
  for (size_t i = 0; i < v3["model"]["merges"].size(); ++i)
    v3_rank[v3["model"]["merges"][i].get<std::string>()] = i;
  size_t previous = 0;
  for (const auto& m : tiny["model"]["merges"]) {
    const auto it = v3_rank.find(m.get<std::string>());
    ASSERT_NE(it, v3_rank.end()) << m;
    EXPECT_GE(it->second, previous) << m;
    previous = it->second;
  }
  // The chat and tool markers have V3's contents and flags (ids differ: ours fit 320).
  for (size_t i = 3; i < tiny["added_tokens"].size(); ++i) {
    nlohmann::json ours = tiny["added_tokens"][i];
    bool found = false;
    for (const auto& theirs : v3["added_tokens"])
      if (theirs["content"] == ours["content"]) {
        ours["id"] = theirs["id"];
        EXPECT_EQ(ours, theirs);
        found = true;
      }
    EXPECT_TRUE(found) << ours["content"];
  }
}

}  // namespace
}  // namespace mla
