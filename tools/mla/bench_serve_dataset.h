// The prompts `mla bench serve` sends (docs/SERVING.md, section `mla bench serve`): random token
// ids (as text through a tokenizer, for the chat endpoint), or conversations of a local
// ShareGPT-format JSON file sampled as vLLM's sharegpt dataset samples them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mla/status.h"
#include "tokenizer/tokenizer_config.h"

namespace mla::cli {

struct BenchPrompt {
  std::vector<int32_t> ids;  // random prompts without text: sent as token ids
  std::string text;          // otherwise the text sent
  int64_t input_len = 0;     // its tokens (the server's usage count replaces it when reported)
  int output_len = 0;        // max tokens asked, with ignore_eos
};

// n prompts of input_len random ids in [low, high) from seed, each asking output_len tokens;
// with a tokenizer, also their text (what the chat endpoint needs: messages are text), whose
// length is that of its encoding.
Result<std::vector<BenchPrompt>> random_prompts(int n, int input_len, int output_len, int low,
                                                int high, uint64_t seed,
                                                const tok::LoadedTokenizer* tk);

// ShareGPT JSON ([{"conversations": [{"from", "value"}, ...]}, ...]): conversations of at least
// two turns, shuffled by seed; each gives its first turn as the prompt and asks for as many
// tokens as its second turn holds (output_len > 0: that many instead); those with a prompt or
// reply under 4 tokens, a prompt over 1,024 or both over 2,048 are skipped, as vLLM skips them;
// the first n kept. invalid_argument naming the file for a malformed file or none kept.
Result<std::vector<BenchPrompt>> sharegpt_prompts(const std::string& path, int n, int output_len,
                                                  uint64_t seed, const tok::LoadedTokenizer& tk);

}  // namespace mla::cli
