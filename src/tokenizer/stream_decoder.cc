// Streaming detokenizer (see stream_decoder.h).
#include "tokenizer/stream_decoder.h"

#include <fmt/format.h>

#include "tokenizer/utf8.h"

namespace mla::tok {

Result<std::string> StreamDecoder::push(int32_t id) {
  const std::string* bytes = t_->token_bytes(id);
  if (!bytes)
    return invalid_argument(fmt::format(
        "stream decode: id {} is not a token (ids run from 0 to {})", id, t_->id_limit() - 1));
  if (opts_.skip_special && t_->is_special(id)) return std::string();
  pending_ += *bytes;
  // Everything before an unfinished trailing sequence can be emitted: a lead byte ends any
  // sequence before it, so the replacement of earlier ill-formed bytes cannot change later.
  const size_t keep = utf8_incomplete_tail(pending_);
  std::string out;
  append_utf8_lossy(std::string_view(pending_).substr(0, pending_.size() - keep), &out);
  pending_.erase(0, pending_.size() - keep);
  return out;
}

std::string StreamDecoder::finish() {
  std::string out;
  append_utf8_lossy(pending_, &out);
  pending_.clear();
  return out;
}

}  // namespace mla::tok
