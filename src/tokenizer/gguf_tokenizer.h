// The tokenizer a GGUF file embeds (tokenizer.ggml.*: model "gpt2" = byte-level BPE, the token
// strings, their types, the merges, the pre-tokenizer's name) turned into the tokenizer.json our
// BPE engine loads, so a GGUF model encodes to the same ids as its Hugging Face directory; and
// back, for `mla quantize`. docs/GGUF.md "Tokenizer" has the mapping.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "io/gguf.h"
#include "mla/status.h"
#include "tokenizer/tokenizer_config.h"

namespace mla::tok {

// The pre-tokenizer (a tokenizer.json "pre_tokenizer" object) of a GGUF pre-tokenizer name:
// "deepseek-v3" (V3, R1, the make-tiny models) and "deepseek-llm" (V2, V2-Lite); unimplemented
// naming any other.
Result<nlohmann::json> pre_tokenizer_of(std::string_view gguf_pre);
// The GGUF name of a tokenizer.json pre_tokenizer, when it is one of those above.
std::optional<std::string> gguf_pre_name(const nlohmann::json& pre_tokenizer);

// tokenizer.json text from f's tokenizer.ggml.* metadata. Errors name the file and the key:
// a model other than "gpt2", an unknown pre name, arrays of different lengths, a merge that is
// not "left right".
Result<std::string> tokenizer_json_from_gguf(const GgufFile& f);

// The tokenizer and its config (BOS / EOS from tokenizer.ggml.{bos,eos}_token_id, add_bos from
// tokenizer.ggml.add_bos_token, tokenizer.chat_template), checked as load_tokenizer_dir checks
// a directory's.
Result<LoadedTokenizer> load_tokenizer_gguf(const std::string& path);

// The tokenizer.ggml.* and tokenizer.chat_template metadata of a model directory's tokenizer
// (tokenizer.json + tokenizer_config.json), for writing a GGUF file; vocab_size pads the token
// list with unused "[PAD<id>]" entries up to the embedding's rows, as llama.cpp's converter does.
Result<std::map<std::string, GgufValue, std::less<>>> gguf_tokenizer_metadata(
    const std::string& model_dir, int64_t vocab_size);

}  // namespace mla::tok
