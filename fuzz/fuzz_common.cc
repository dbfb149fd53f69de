// The fuzz targets' shared helpers (see fuzz_common.h).
#include "fuzz_common.h"

#include <map>
#include <memory>
#include <mutex>

#include "model/model_config.h"
#include "tiny/tiny_checkpoint.h"
#include "tiny/tiny_tokenizer.h"
#include "tokenizer/tiktoken.h"
#include "tokenizer/utf8.h"

namespace mla::fuzz {

const tok::LoadedTokenizer& tiny_tokenizer(std::string_view family) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<tok::LoadedTokenizer>, std::less<>> cache;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache.find(family); it != cache.end()) return *it->second;
  TinyCheckpointOptions opts;
  opts.family = std::string(family);
  Result<std::string> config_text = tiny_config_json(opts);
  MLA_CHECK(config_text.ok(), "{}", config_text.status().to_string());
  Result<ModelConfig> config = parse_model_config(*config_text, "tiny config.json");
  MLA_CHECK(config.ok(), "{}", config.status().to_string());
  Result<TinyTokenizerFiles> files = tiny_tokenizer_files(family, *config);
  MLA_CHECK(files.ok(), "{}", files.status().to_string());
  Result<tok::TokenizerConfig> tc =
      tok::parse_tokenizer_config(files->tokenizer_config_json, "tiny tokenizer_config.json");
  MLA_CHECK(tc.ok(), "{}", tc.status().to_string());
  // Kimi-K2 / Moonlight: a tiktoken ranks file, turned into the same BPE as load_tiktoken_dir.
  std::string json_text = files->tokenizer_json;
  if (json_text.empty()) {
    Result<std::vector<tok::RankedToken>> ranks =
        tok::parse_tiktoken_ranks(files->tiktoken_model, "tiny tiktoken.model");
    MLA_CHECK(ranks.ok(), "{}", ranks.status().to_string());
    json_text =
        tok::tiktoken_tokenizer_json(*ranks, tok::kimi_pattern(), tc->added_tokens_decoder).dump();
  }
  Result<tok::Tokenizer> t = tok::Tokenizer::from_json(json_text, "tiny tokenizer");
  MLA_CHECK(t.ok(), "{}", t.status().to_string());
  std::optional<int32_t> bos, eos;
  if (tc->bos_token) bos = t->token_to_id(*tc->bos_token);
  if (tc->eos_token) eos = t->token_to_id(*tc->eos_token);
  t->set_bos_eos(bos, eos);
  auto loaded =
      std::make_unique<tok::LoadedTokenizer>(tok::LoadedTokenizer{std::move(*t), std::move(*tc)});
  return *cache.emplace(std::string(family), std::move(loaded)).first->second;
}

bool valid_utf8(std::string_view s) {
  return tok::utf8_valid_prefix(s) == s.size();
}

}  // namespace mla::fuzz
