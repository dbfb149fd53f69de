// Encoding and decoding (see tokenizer.h); loading is in tokenizer_json.cc.
#include "tokenizer/tokenizer.h"

#include <fmt/format.h>

#include "tokenizer/utf8.h"

namespace mla::tok {

Status Tokenizer::encode_text(std::string_view text, std::vector<int32_t>* ids) const {
  thread_local Pieces pieces;
  MLA_RETURN_IF_ERROR(pre_->split(text, &pieces));
  for (std::string_view piece : pieces.list) bpe_->encode_piece(piece, ids);
  return Status();
}

Status Tokenizer::encode_append(std::string_view text, const EncodeOptions& opts,
                                std::vector<int32_t>* ids) const {
  const size_t valid = utf8_valid_prefix(text);
  if (valid != text.size())
    return invalid_argument(
        fmt::format("tokenizer input: not valid UTF-8 at byte {} of {} (byte 0x{:02X})", valid,
                    text.size(), static_cast<uint8_t>(text[valid])));
  if (opts.add_bos && !bos_id_)
    return invalid_argument(fmt::format(
        "{}: add_bos was asked for but no BOS token is known (load the model directory, whose "
        "tokenizer_config.json names it)",
        origin_));
  const size_t before = ids->size();
  if (opts.add_bos) ids->push_back(*bos_id_);
  Status st;
  if (opts.parse_special && !matcher_->empty()) {
    thread_local std::vector<Segment> segments;
    segments.clear();
    matcher_->split(text, &segments);
    for (const Segment& s : segments) {
      if (s.id >= 0) {
        // Exactly one BOS: the text's own leading BOS stands in for add_bos.
        if (!(opts.add_bos && ids->size() == before + 1 && s.id == *bos_id_)) ids->push_back(s.id);
        continue;
      }
      st = encode_text(s.text, ids);
      if (!st.ok()) break;
    }
  } else {
    st = encode_text(text, ids);
  }
  if (!st.ok()) ids->resize(before);
  return st;
}

Result<std::vector<int32_t>> Tokenizer::encode(std::string_view text,
                                               const EncodeOptions& opts) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  MLA_RETURN_IF_ERROR(encode_append(text, opts, &ids));
  return ids;
}

Result<std::string> Tokenizer::decode(std::span<const int32_t> ids,
                                      const DecodeOptions& opts) const {
  std::string bytes;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id < 0 || id >= id_limit() || id_kind_[id] == 0)
      return invalid_argument(
          fmt::format("decode: ids[{}] = {} is not a token of {} (ids run from 0 to {})", i, id,
                      origin_, id_limit() - 1));
    if (opts.skip_special && id_kind_[id] == 3) continue;
    bytes += token_bytes_[id];
  }
  std::string text;
  text.reserve(bytes.size());
  append_utf8_lossy(bytes, &text);
  return text;
}

const std::string* Tokenizer::token_bytes(int32_t id) const {
  if (id < 0 || id >= id_limit() || id_kind_[id] == 0) return nullptr;
  return &token_bytes_[id];
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  for (const AddedToken& a : added_)
    if (a.content == token) return a.id;
  return bpe_->token_to_id(token);
}

const std::string* Tokenizer::id_to_token(int32_t id) const {
  if (id < 0 || id >= id_limit()) return nullptr;
  if (added_index_[id] >= 0) return &added_[added_index_[id]].content;
  return bpe_->id_to_token(id);
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < id_limit() && id_kind_[id] == 3;
}

}  // namespace mla::tok
