// Model::forward and Model::follow: one forward pass run by every rank of a model split over
// ranks (docs/ARCHITECTURE.md §Ranks). The leader checks the batch, sends it as one message of
// int64 values to the followers and runs it; each follower runs what it receives on its own cache.
#include <fmt/format.h>

#include <array>
#include <cstdint>
#include <optional>

#include "dist/communicator.h"
#include "model/model_impl.h"

namespace mla {
namespace {

// The fixed part of a step, sent first (the followers wait on it between steps).
enum StepField : size_t {
  kKind,  // kStop or kForward
  kTokens,
  kSeqs,
  kAllLogits,
  kCopies,
  kTableEntries,
  kLayers,  // the leader's cache shape: a follower (re)allocates its own to match
  kBlocks,
  kPageSize,
  kRecordBytes,
  kFields
};
enum StepKind : int64_t { kStop = 0, kForward = 1 };
using StepHeader = std::array<int64_t, kFields>;

// The rest: tokens [n], per sequence (start, n_tokens, table length) [3·seqs], the tables
// [Σ lengths], the cache's copy-on-write copies (dst, src, slots) [3·copies].
std::vector<int64_t> encode_step(const ForwardBatch& b, const std::vector<SlotCopy>& copies,
                                 StepHeader& h) {
  std::vector<int64_t> body(b.tokens.begin(), b.tokens.end());
  int64_t entries = 0;
  for (const ForwardSeq& s : b.seqs) {
    body.insert(body.end(), {s.start, s.n_tokens, int64_t(s.block_table.size())});
    entries += int64_t(s.block_table.size());
  }
  for (const ForwardSeq& s : b.seqs)
    body.insert(body.end(), s.block_table.begin(), s.block_table.end());
  for (const SlotCopy& c : copies) body.insert(body.end(), {c.dst, c.src, c.num_slots});
  h[kKind] = kForward;
  h[kTokens] = int64_t(b.tokens.size());
  h[kSeqs] = int64_t(b.seqs.size());
  h[kAllLogits] = b.all_logits;
  h[kCopies] = int64_t(copies.size());
  h[kTableEntries] = entries;
  return body;
}

size_t body_size(const StepHeader& h) {
  return size_t(h[kTokens] + 3 * h[kSeqs] + h[kTableEntries] + 3 * h[kCopies]);
}

}  // namespace

int Model::rank() const {
  return impl_->rank;
}
int Model::ranks() const {
  return impl_->ranks;
}

std::string Model::split_summary() const {
  const Impl& m = *impl_;
  if (!m.comm) return "";
  std::string s = fmt::format("rank {} of {}: heads {}-{}", m.rank, m.ranks, m.rank * m.heads,
                              (m.rank + 1) * m.heads - 1);
  for (const LayerRuntime& L : m.layers) {
    if (!L.moe || L.experts.empty()) continue;
    const int E = m.weights.config.n_routed_experts;
    if (int(L.experts.size()) == E)
      s += fmt::format(", every routed expert's width ({} of {} columns)", L.experts[0].width,
                       m.weights.config.moe_intermediate_size);
    else
      s += fmt::format(", routed experts {}-{} whole", L.expert_first,
                       L.expert_first + int(L.experts.size()) - 1);
    break;
  }
  return s;
}

Model::~Model() {
  if (impl_ && impl_->comm && impl_->comm->leader()) {  // the followers' follow() returns
    StepHeader h{};
    h[kKind] = kStop;
    impl_->comm->broadcast_waiting(h.data(), sizeof h);
  }
}

Result<ForwardStats> Model::forward(const ForwardBatch& b, KvCacheStorage& cache, ThreadPool& pool,
                                    std::vector<float>& logits) {
  const Impl& m = *impl_;
  MLA_RETURN_IF_ERROR(check_forward(m, b, cache));
  if (!m.comm) return forward_local(m, b, cache, pool, logits);
  if (!m.comm->leader())
    return invalid_argument("forward: called on follower rank " + std::to_string(m.rank));
  if (!cache.shape().record_copies)
    return invalid_argument(
        "forward: a model split over ranks needs a cache made from its cache_shape() (one that "
        "records its copy-on-write copies for the followers)");
  // The leader gathers [rows, V] logits with int counts and displacements (MPI's).
  const int64_t rows = b.all_logits ? int64_t(b.tokens.size()) : int64_t(b.seqs.size());
  if (rows * m.weights.config.vocab_size > int64_t(INT32_MAX))
    return invalid_argument(fmt::format(
        "forward: {} rows of {} logits are more than one gather across ranks carries (2^31); "
        "use shorter prefill chunks",
        rows, m.weights.config.vocab_size));
  StepHeader h{};
  std::vector<int64_t> body = encode_step(b, cache.take_copies(), h);
  h[kLayers] = cache.num_layers();
  h[kBlocks] = cache.num_blocks();
  h[kPageSize] = cache.page_size();
  h[kRecordBytes] = cache.record_bytes();
  m.comm->broadcast_waiting(h.data(), sizeof h);
  m.comm->broadcast(body.data(), body.size() * sizeof(int64_t));
  Result<ForwardStats> r = forward_local(m, b, cache, pool, logits);
  if (!r.ok()) m.comm->abort("forward: " + r.status().message());
  return r;
}

Status Model::follow(ThreadPool& pool) {
  const Impl& m = *impl_;
  if (!m.comm || m.comm->leader())
    return invalid_argument("follow: this process is not a follower rank");
  std::optional<KvCacheStorage> cache;
  std::vector<int64_t> body;
  std::vector<int32_t> tokens, tables;
  std::vector<float> logits;  // stays empty: the leader gathers the logits
  for (;;) {
    StepHeader h{};
    m.comm->broadcast_waiting(h.data(), sizeof h);
    if (h[kKind] == kStop) return Status();
    body.resize(body_size(h));
    m.comm->broadcast(body.data(), body.size() * sizeof(int64_t));
    const KvCacheShape shape{.num_layers = int(h[kLayers]),
                             .num_blocks = int32_t(h[kBlocks]),
                             .page_size = int(h[kPageSize]),
                             .record_bytes = h[kRecordBytes]};
    if (!cache || cache->num_layers() != shape.num_layers ||
        cache->num_blocks() != shape.num_blocks || cache->page_size() != shape.page_size ||
        cache->record_bytes() != shape.record_bytes) {
      cache.reset();
      Result<KvCacheStorage> c = KvCacheStorage::allocate(shape);
      if (!c.ok()) m.comm->abort("follow: " + c.status().message());
      cache.emplace(std::move(*c));
    }
    const int64_t* p = body.data();
    tokens.assign(p, p + h[kTokens]);
    p += h[kTokens];
    ForwardBatch b;
    b.all_logits = h[kAllLogits] != 0;
    const int64_t* seq = p;
    p += 3 * h[kSeqs];
    tables.assign(p, p + h[kTableEntries]);
    p += h[kTableEntries];
    size_t at = 0;
    for (int64_t s = 0; s < h[kSeqs]; ++s) {
      const size_t len = size_t(seq[3 * s + 2]);
      b.seqs.push_back(
          {std::span<const int32_t>(tables.data() + at, len), seq[3 * s], int(seq[3 * s + 1])});
      at += len;
    }
    for (int64_t i = 0; i < h[kCopies]; ++i, p += 3)
      cache->copy_slots(BlockId(p[0]), BlockId(p[1]), int(p[2]));
    b.tokens = tokens;
    Result<ForwardStats> r = forward_local(m, b, *cache, pool, logits);
    if (!r.ok()) m.comm->abort("forward: " + r.status().message());
  }
}

}  // namespace mla
