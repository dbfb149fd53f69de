// F6 (docs/RELIABILITY.md §Checklist): an id sequence → the incremental detokenizer. Ids are 16-bit
// values from the input, some beyond the vocabulary. Invariants: an unknown id is an error that
// changes nothing; every push() and finish() output is valid UTF-8 on its own; the held-back tail
// is at most 3 bytes; the concatenation equals Tokenizer::decode of the accepted ids.
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_common.h"
#include "tokenizer/stream_decoder.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mla;
  const tok::LoadedTokenizer& lt = fuzz::tiny_tokenizer(size % 2 ? "kimi-k2" : "v3");
  const tok::Tokenizer& t = lt.tokenizer;
  fuzz::ByteReader in(data, size);
  tok::DecodeOptions opts;
  opts.skip_special = in.u8() & 1;
  tok::StreamDecoder dec(t, opts);
  std::vector<int32_t> accepted;
  std::string streamed;
  while (!in.empty()) {
    const int32_t id = int32_t(in.u16()) - 8;  // a few negative ids too
    const size_t pending = dec.pending_bytes();
    Result<std::string> piece = dec.push(id);
    if (!piece.ok()) {
      MLA_CHECK(id < 0 || id >= t.id_limit() || !t.token_bytes(id), "known id {} refused", id);
      MLA_CHECK(dec.pending_bytes() == pending, "a refused id changed the decoder");
      continue;
    }
    MLA_CHECK(fuzz::valid_utf8(*piece), "push({}) emitted invalid UTF-8", id);
    MLA_CHECK(dec.pending_bytes() <= 3, "{} bytes held back", dec.pending_bytes());
    accepted.push_back(id);
    streamed += *piece;
  }
  const std::string tail = dec.finish();
  MLA_CHECK(fuzz::valid_utf8(tail), "finish() emitted invalid UTF-8");
  streamed += tail;
  Result<std::string> whole = t.decode(accepted, opts);
  MLA_CHECK(whole.ok(), "decode failed: {}", whole.status().to_string());
  MLA_CHECK(*whole == streamed, "streamed text differs from decode ({} vs {} bytes)",
            streamed.size(), whole->size());
  return 0;
}
