// BPE merge loop and model checks (see bpe.h).
#include "tokenizer/bpe.h"

#include <algorithm>
#include <atomic>

#include <fmt/format.h>

#include "core/checked_math.h"
#include "io/safetensors_header.h"
#include "tokenizer/byte_level.h"

namespace mla::tok {
namespace {

using io_detail::quote_text;

constexpr size_t kCacheMaxPieceBytes = 64;
constexpr size_t kCacheMaxEntries = 1 << 16;

MLA_WRAPS_ON_PURPOSE uint64_t mix(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  return k;
}

std::atomic<uint64_t> g_next_serial{1};

// Per-thread memo of piece → ids for the model last used on this thread. Keyed by the model's
// serial number, never its address, so a new model at a reused address never sees stale ids.
struct PieceCache {
  uint64_t serial = 0;
  std::unordered_map<std::string, std::vector<int32_t>> map;
};

}  // namespace

Result<BpeModel> BpeModel::build(BpeSpec spec, std::string_view where) {
  BpeModel m;
  m.ignore_merges_ = spec.ignore_merges;
  m.serial_ = g_next_serial.fetch_add(1);
  int32_t max_id = -1;
  // The id table is sized by the largest id, so an id must not be able to ask for more memory
  // than the entries themselves justify: one token with id 2^31-1 would otherwise allocate 2^31
  // strings (64 GiB). Real vocabularies are dense; kMaxVocabIdGap allows reserved holes.
  const int64_t id_bound = int64_t(spec.vocab.size()) + kMaxVocabIdGap;
  for (const auto& [text, id] : spec.vocab) {
    if (id < 0)
      return invalid_argument(
          fmt::format("{}: model.vocab: token {} has negative id {}", where, quote_text(text), id));
    if (id >= id_bound)
      return invalid_argument(fmt::format(
          "{}: model.vocab: token {} has id {}, not below the {} entries + {} allowed as holes",
          where, quote_text(text), id, spec.vocab.size(), kMaxVocabIdGap));
    max_id = std::max(max_id, id);
  }
  m.id_to_token_.assign(static_cast<size_t>(max_id) + 1, std::string());
  m.has_id_.assign(static_cast<size_t>(max_id) + 1, false);
  m.vocab_.reserve(spec.vocab.size());
  for (auto& [text, id] : spec.vocab) {
    if (m.has_id_[id])
      return invalid_argument(fmt::format("{}: model.vocab: id {} is given to both {} and {}",
                                          where, id, quote_text(m.id_to_token_[id]),
                                          quote_text(text)));
    m.has_id_[id] = true;
    m.id_to_token_[id] = text;
    m.vocab_.emplace(std::move(text), id);
  }
  for (int b = 0; b < 256; ++b) {
    const std::string t = bytes_to_token_text(std::string(1, static_cast<char>(b)));
    const auto it = m.vocab_.find(t);
    if (it == m.vocab_.end())
      return invalid_argument(fmt::format(
          "{}: model.vocab lacks the byte-level token {} for byte 0x{:02X}; a byte-level BPE "
          "vocabulary must hold all 256",
          where, quote_text(t), b));
    m.byte_id_[b] = it->second;
  }
  size_t cap = 16;
  while (cap < spec.merges.size() * 2) cap <<= 1;
  m.merges_.assign(cap, MergeSlot{});
  for (size_t rank = 0; rank < spec.merges.size(); ++rank) {
    const auto& [a, b] = spec.merges[rank];
    const auto ia = m.vocab_.find(a), ib = m.vocab_.find(b), ic = m.vocab_.find(a + b);
    const auto* missing = ia == m.vocab_.end() ? &a : ib == m.vocab_.end() ? &b : nullptr;
    if (missing)
      return invalid_argument(fmt::format("{}: model.merges[{}] ({} {}) names {}, not in the vocab",
                                          where, rank, quote_text(a), quote_text(b),
                                          quote_text(*missing)));
    if (ic == m.vocab_.end())
      return invalid_argument(
          fmt::format("{}: model.merges[{}] ({} {}) makes {}, which is not in the vocab", where,
                      rank, quote_text(a), quote_text(b), quote_text(a + b)));
    const uint64_t key = pair_key(ia->second, ib->second);
    size_t slot = mix(key) & (cap - 1);
    while (m.merges_[slot].key != kEmpty && m.merges_[slot].key != key)
      slot = (slot + 1) & (cap - 1);
    if (m.merges_[slot].key == key)
      return invalid_argument(fmt::format("{}: model.merges[{}] ({} {}) repeats model.merges[{}]",
                                          where, rank, quote_text(a), quote_text(b),
                                          m.merges_[slot].rank));
    m.merges_[slot] = {key, static_cast<int32_t>(rank), ic->second};
  }
  m.merge_count_ = spec.merges.size();
  return m;
}

const BpeModel::MergeSlot* BpeModel::find_merge(int32_t a, int32_t b) const {
  const uint64_t key = pair_key(a, b);
  const size_t mask = merges_.size() - 1;
  for (size_t slot = mix(key) & mask;; slot = (slot + 1) & mask) {
    if (merges_[slot].key == key) return &merges_[slot];
    if (merges_[slot].key == kEmpty) return nullptr;
  }
}

void BpeModel::merge_word(std::string_view piece, std::vector<int32_t>* out) const {
  // Symbols form a linked list over the piece's bytes; a merge keeps the left symbol's slot.
  // Heap entries go stale when a neighbour changes; they are recognised by re-looking up the
  // pair, as in Hugging Face's Word::merge_all.
  struct Entry {
    int32_t rank;
    int32_t pos;
    int32_t new_id;
  };
  const auto later = [](const Entry& x, const Entry& y) {
    return x.rank != y.rank ? x.rank > y.rank : x.pos > y.pos;
  };
  const auto n = static_cast<int32_t>(piece.size());
  std::vector<int32_t> id(n), prev(n), next(n);
  std::vector<Entry> heap;
  heap.reserve(n);
  for (int32_t i = 0; i < n; ++i) {
    id[i] = byte_id_[static_cast<uint8_t>(piece[i])];
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  for (int32_t i = 0; i + 1 < n; ++i)
    if (const MergeSlot* m = find_merge(id[i], id[i + 1])) heap.push_back({m->rank, i, m->new_id});
  std::make_heap(heap.begin(), heap.end(), later);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const Entry top = heap.back();
    heap.pop_back();
    const int32_t p = top.pos;
    if (id[p] < 0 || next[p] < 0) continue;
    const int32_t q = next[p];
    const MergeSlot* m = find_merge(id[p], id[q]);
    if (!m || m->new_id != top.new_id) continue;
    id[p] = top.new_id;
    id[q] = -1;
    next[p] = next[q];
    if (next[q] >= 0) prev[next[q]] = p;
    if (prev[p] >= 0)
      if (const MergeSlot* l = find_merge(id[prev[p]], id[p])) {
        heap.push_back({l->rank, prev[p], l->new_id});
        std::push_heap(heap.begin(), heap.end(), later);
      }
    if (next[p] >= 0)
      if (const MergeSlot* r = find_merge(id[p], id[next[p]])) {
        heap.push_back({r->rank, p, r->new_id});
        std::push_heap(heap.begin(), heap.end(), later);
      }
  }
  for (int32_t i = 0; i >= 0 && i < n; i = next[i]) out->push_back(id[i]);
}

void BpeModel::encode_piece(std::string_view piece, std::vector<int32_t>* out) const {
  if (piece.empty()) return;
  if (piece.size() == 1) {
    out->push_back(byte_id_[static_cast<uint8_t>(piece[0])]);
    return;
  }
  if (ignore_merges_)
    if (auto it = vocab_.find(bytes_to_token_text(piece)); it != vocab_.end()) {
      out->push_back(it->second);
      return;
    }
  if (piece.size() > kCacheMaxPieceBytes) {
    merge_word(piece, out);
    return;
  }
  thread_local PieceCache cache;
  if (cache.serial != serial_) {
    cache.map.clear();
    cache.serial = serial_;
  }
  const std::string key(piece);
  if (auto it = cache.map.find(key); it != cache.map.end()) {
    out->insert(out->end(), it->second.begin(), it->second.end());
    return;
  }
  const size_t before = out->size();
  merge_word(piece, out);
  if (cache.map.size() >= kCacheMaxEntries) cache.map.clear();
  cache.map.emplace(key, std::vector<int32_t>(out->begin() + before, out->end()));
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  const auto it = vocab_.find(std::string(token));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || id >= static_cast<int32_t>(id_to_token_.size()) || !has_id_[id]) return nullptr;
  return &id_to_token_[id];
}

}  // namespace mla::tok
