// The tokenizer files `mla make-tiny` writes next to config.json, so that text prompts and chat
// work on tiny models. kimi-k2 and moonlight get their checkpoints' format: tiktoken.model (the
// byte tokens and merge results below as "<base64> <rank>" lines) and a tokenizer_config.json
// whose added_tokens_decoder lists the special tokens. The other families get tokenizer.json in
// Hugging Face `tokenizers` format, laid out like
// DeepSeek-V3's (docs/TOKENIZER.md §DeepSeek-V3 tokenizer.json: empty normalizer, the V3 Split
// pre-tokenizers + ByteLevel, ByteLevel decoder, BPE) with a tiny vocabulary, and
// tokenizer_config.json (BOS / EOS names, add_bos_token, a chat template of the family's format).
// Not a trained tokenizer: a few hand-picked English merges over the 256 byte tokens.
//
// Ids (all below the tiny vocab_size of 320):
//   DeepSeek families (v2-lite, v2, v3): 0 <｜begin▁of▁sentence｜> (BOS), 1 <｜end▁of▁sentence｜>
//     (EOS), 2 <｜▁pad▁｜>, 3..258 the bytes in GPT-2 alphabet order (as V3), then the merges,
//     then <｜User｜>, <｜Assistant｜> and V3's tool-call tokens.
//   kimi-k2, moonlight: 0 [BOS], 1 [EOS], 2..257 the bytes, the merges, then <|im_end|>,
//     <|im_user|>, <|im_assistant|>, <|im_system|>, <|im_middle|> and the tool-call markers
//     (the real models put their specials after the ranks, from 163584; here BOS and EOS keep the
//     ids 0 and 1 that every tiny config has).
//   minicpm3: 0 <s>, 1 </s>, 2 <unk>, 3..258 the bytes, the merges, then <|im_start|>, <|im_end|>.
// Chat templates: v3 → deepseek-v3 (without tool calls in the Jinja text; the built-in renderer
// has them), v2 / v2-lite → deepseek-v2, kimi-k2 → kimi-k2, moonlight → moonlight, minicpm3 →
// chatml, as
// tok::detect_chat_format recognises them. The pre-tokenizer is V3's for the tokenizer.json
// families; the tiktoken ones are split with Kimi's pattern (tok::kimi_pattern).
#pragma once

#include <string>
#include <string_view>

#include "mla/status.h"
#include "model/model_config.h"

namespace mla {

struct TinyTokenizerFiles {
  std::string tokenizer_json;         // tokenizer.json text; empty for kimi-k2 and moonlight
  std::string tokenizer_config_json;  // tokenizer_config.json text
  std::string tiktoken_model;         // tiktoken.model text (kimi-k2, moonlight); else empty
};

// Both files for `family` (one of tiny_family_names()) and the config make-tiny wrote for it:
// BOS and EOS get its bos_token_id / first eos_token_id, and every id stays below its
// vocab_size. Same inputs → byte-identical text. Errors: invalid_argument for an unknown family
// or a config whose bos / eos / vocab_size do not fit the layout above.
Result<TinyTokenizerFiles> tiny_tokenizer_files(std::string_view family, const ModelConfig& config);

}  // namespace mla
