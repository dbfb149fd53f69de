// Incremental detokenizer for streaming (SSE): ids go in one at a time and only complete UTF-8
// comes out, so a client never sees half a character. The concatenation of every push() and the
// final finish() equals Tokenizer::decode of all the ids.
#pragma once

#include <cstdint>
#include <string>

#include "mla/status.h"
#include "tokenizer/tokenizer.h"

namespace mla::tok {

class StreamDecoder {
 public:
  // `t` must outlive the decoder.
  explicit StreamDecoder(const Tokenizer& t, DecodeOptions opts = {}) : t_(&t), opts_(opts) {}

  // Text completed by this id (often empty while a multi-byte character is still arriving).
  // An id the tokenizer lacks is an error and changes nothing.
  Result<std::string> push(int32_t id);

  // The held-back bytes (at most 3, an unfinished character) as U+FFFD; resets the decoder.
  std::string finish();

  // Bytes held back waiting for the rest of a character (0..3).
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer* t_;
  DecodeOptions opts_;
  std::string pending_;
};

}  // namespace mla::tok
