// mla::tok::Tokenizer: a Hugging Face tokenizer.json (byte-level BPE, as in DeepSeek-V2/V3/R1)
// loaded into an immutable object that encodes text to ids and decodes ids to text, giving the
// ids Hugging Face `tokenizers` gives. Thread-safe after load. Chat formats live in chat_format.h.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mla/status.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pre_tokenizer.h"

namespace mla::tok {

struct EncodeOptions {
  // false (default): the whole text is plain text, so a user typing "<｜User｜>" gets ordinary
  // tokens and never a control id. true: added-token text becomes its id (special or not), as
  // Hugging Face's encode does; for tools, and for text the program itself wrote.
  bool parse_special = false;
  // Prepend the BOS id once (not again when parse_special already produced it first). Needs a
  // BOS, known from tokenizer_config.json (load_dir) or set_bos_eos.
  bool add_bos = false;
};

struct DecodeOptions {
  bool skip_special = false;  // drop added tokens marked special
};

class Tokenizer {
 public:
  // Parses tokenizer.json text; `origin` (a path) prefixes every error message.
  static Result<Tokenizer> from_json(std::string_view json, std::string_view origin);
  static Result<Tokenizer> from_file(const std::string& path);
  // The same from an already parsed tokenizer.json object (tiktoken.h builds one).
  static Result<Tokenizer> from_json_object(const nlohmann::json& root, std::string_view origin);

  // Encodes valid UTF-8 (invalid input is an error naming the byte offset). Linear in the text.
  Result<std::vector<int32_t>> encode(std::string_view text, const EncodeOptions& opts = {}) const;
  // Same, appending to *ids (which is left as it was on error).
  Status encode_append(std::string_view text, const EncodeOptions& opts,
                       std::vector<int32_t>* ids) const;

  // Ids to text: the ByteLevel decoder, then UTF-8 with each ill-formed part replaced by U+FFFD
  // (as Hugging Face does). An id the tokenizer does not have is an error naming it.
  Result<std::string> decode(std::span<const int32_t> ids, const DecodeOptions& opts = {}) const;

  // The bytes id decodes to (may be part of a UTF-8 sequence), or nullptr for an unknown id.
  const std::string* token_bytes(int32_t id) const;
  // Id of an added token's content, else of a vocabulary entry in byte-level form ("Ġthe").
  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The added token's content or the vocabulary entry of id; nullptr for an unknown id.
  const std::string* id_to_token(int32_t id) const;
  bool is_special(int32_t id) const;
  // One past the largest id the tokenizer can produce (the model's embedding may be larger).
  int32_t id_limit() const { return static_cast<int32_t>(token_bytes_.size()); }
  const std::vector<AddedToken>& added_tokens() const { return added_; }
  const BpeModel& model() const { return *bpe_; }

  std::optional<int32_t> bos_id() const { return bos_id_; }
  std::optional<int32_t> eos_id() const { return eos_id_; }
  void set_bos_eos(std::optional<int32_t> bos, std::optional<int32_t> eos) {
    bos_id_ = bos;
    eos_id_ = eos;
  }

 private:
  friend class TokenizerBuilder;
  Tokenizer() = default;
  Status encode_text(std::string_view text, std::vector<int32_t>* ids) const;

  std::string origin_;
  std::shared_ptr<const BpeModel> bpe_;
  std::shared_ptr<const PreTokenizer> pre_;
  std::vector<AddedToken> added_;
  std::shared_ptr<const AddedTokenMatcher> matcher_;
  std::vector<std::string> token_bytes_;  // by id; decoded bytes
  std::vector<uint8_t> id_kind_;          // by id: 0 unknown, 1 vocab, 2 added, 3 added special
  std::vector<int32_t> added_index_;      // by id: index into added_, or -1
  std::optional<int32_t> bos_id_, eos_id_;
};

}  // namespace mla::tok
