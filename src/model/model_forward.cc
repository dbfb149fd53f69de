// Model::forward: embeddings → decoder layers (MLA attention over the paged latent cache, then the
// dense or MoE FFN) → final norm → lm_head, for a batch of chunks of several sequences.
#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "dist/communicator.h"
#include "kernels/mla_attention.h"
#include "model/model_impl.h"

namespace mla {

namespace {
// Σ x[j]² in 16 running sums (j mod 16), added in order at the end: one long chain of dependent
// adds (an add's latency each) ran on the engine thread alone while the pool waited, and 16
// independent lanes vectorise without reassociating (Q8_0 prefill 512 measured 2% faster). The
// order is fixed: the same sum on every CPU and batch.
float sum_of_squares(const float* x, int dim) {
  constexpr int kLanes = 16;
  float part[kLanes] = {};
  int j = 0;
  for (; j + kLanes <= dim; j += kLanes)
    for (int k = 0; k < kLanes; ++k) part[k] += x[j + k] * x[j + k];
  for (int k = 0; j < dim; ++j, ++k) part[k] += x[j] * x[j];
  float ss = 0.0f;
  for (int k = 0; k < kLanes; ++k) ss += part[k];
  return ss;
}
}  // namespace

void rms_norm(const float* x, const float* w, int64_t n, int dim, float eps, int64_t x_stride,
              int64_t y_stride, float* y) {
  for (int64_t i = 0; i < n; ++i) {
    const float* xi = x + i * x_stride;
    float* yi = y + i * y_stride;
    const float ss = sum_of_squares(xi, dim);
    const float inv = 1.0f / std::sqrt(ss / float(dim) + eps);
    for (int j = 0; j < dim; ++j) yi[j] = xi[j] * inv * w[j];
  }
}

namespace {

// Where each token of the batch sits: its sequence and absolute position.
struct TokenPlace {
  int seq = 0;
  int64_t pos = 0;
};

Status check_batch(const Model::Impl& m, const ForwardBatch& b, int page_size, int32_t num_blocks) {
  const ModelConfig& c = m.weights.config;
  int64_t total = 0;
  for (size_t s = 0; s < b.seqs.size(); ++s) {
    const ForwardSeq& q = b.seqs[s];
    if (q.n_tokens < 1 || q.start < 0)
      return invalid_argument(fmt::format("forward: sequence {} has {} tokens from position {}", s,
                                          q.n_tokens, q.start));
    const int64_t end = q.start + q.n_tokens;
    if (end > m.max_context)
      return invalid_argument(fmt::format(
          "forward: sequence {} reaches position {}, past the model's context of {} tokens", s,
          end - 1, m.max_context));
    if (int64_t(q.block_table.size()) * page_size < end)
      return invalid_argument(fmt::format(
          "forward: sequence {}'s block table ({} pages of {}) does not cover {} tokens", s,
          q.block_table.size(), page_size, end));
    // The pages the forward pass writes and reads: rows are addressed without further checks.
    for (int64_t p = 0; p < (end + page_size - 1) / page_size; ++p)
      if (q.block_table[size_t(p)] < 0 || q.block_table[size_t(p)] >= num_blocks)
        return invalid_argument(fmt::format(
            "forward: sequence {}'s block table entry {} is page {}, outside the cache's {} pages",
            s, p, q.block_table[size_t(p)], num_blocks));
    total += q.n_tokens;
  }
  if (total != int64_t(b.tokens.size()))
    return invalid_argument(
        fmt::format("forward: {} tokens given, the sequences hold {}", b.tokens.size(), total));
  for (size_t i = 0; i < b.tokens.size(); ++i)
    if (b.tokens[i] < 0 || b.tokens[i] >= c.vocab_size)
      return invalid_argument(fmt::format("forward: token id {} at index {} is outside [0, {})",
                                          b.tokens[i], i, c.vocab_size));
  return Status();
}

// Attention of one layer for every token: out [T, H, d_v].
//   q [T, H, d_n + d_r] (q_pe rotated); the cache rows of all tokens already written.
Status attention(const Model::Impl& m, const LayerRuntime& L, const ForwardBatch& b,
                 const std::vector<int64_t>& first_token, KvCacheStorage& cache, int layer,
                 const float* q, float* out, ThreadPool& pool, ForwardStats* stats) {
  const ModelConfig& c = m.weights.config;
  const int H = m.heads, d_qk = c.d_qk(), d_v = c.v_head_dim;  // this rank's heads
  // This layer's pages, for sequences with the given block tables [b, max_blocks] and lengths.
  auto layer_cache = [&](const int32_t* block_table, int max_blocks, const int32_t* seq_lens) {
    return PagedLatentCache{.dtype = kv_cache_latent_dtype(m.options.kv_dtype),
                            .global_scale = kNvfp4DefaultGlobalScale,
                            .rows = cache.layer_base(layer),
                            .page_size = cache.page_size(),
                            .num_blocks = cache.num_blocks(),
                            .block_table = block_table,
                            .max_blocks_per_seq = max_blocks,
                            .seq_lens = seq_lens};
  };
  // The decode batch's gathered block tables, lengths, queries and outputs, and the lse rows:
  // kept between layers and calls (this runs on the engine thread only), so a decode step
  // allocates nothing here.
  static thread_local std::vector<int> decode;
  static thread_local std::vector<int32_t> table, seqlens;
  static thread_local AlignedBuffer<float> qd_buf, od_buf, lse_buf;
  // Decode tokens (chunks of one) of every sequence go through one batched kernel call.
  decode.clear();
  for (size_t s = 0; s < b.seqs.size(); ++s)
    if (b.seqs[s].n_tokens == 1) decode.push_back(int(s));
  if (!decode.empty()) {
    size_t max_blocks = 0;
    for (int s : decode) max_blocks = std::max(max_blocks, b.seqs[s].block_table.size());
    const size_t n = decode.size();
    table.assign(n * max_blocks, 0);
    seqlens.resize(n);
    float* qd = grown(qd_buf, n * H * d_qk);
    float* od = grown(od_buf, n * H * d_v);
    float* lse = grown(lse_buf, n * H);
    for (size_t i = 0; i < n; ++i) {
      const ForwardSeq& sq = b.seqs[decode[i]];
      std::copy(sq.block_table.begin(), sq.block_table.end(), table.begin() + i * max_blocks);
      seqlens[i] = int32_t(sq.start + 1);
      std::memcpy(&qd[i * H * d_qk], q + first_token[decode[i]] * H * d_qk,
                  sizeof(float) * H * d_qk);
    }
    MlaDecodeBatchParams p;
    p.b = int(n);
    p.d_r = c.qk_rope_head_dim;
    p.q = qd;
    p.cache = layer_cache(table.data(), int(max_blocks), seqlens.data());
    p.w = &L.absorbed;
    p.softmax_scale = m.softmax_scale;
    p.absorbed_q_dtype = m.options.attention_q_dtype;
    p.out = od;
    p.lse = lse;
    p.int8_products = prefill_attention_dtype(m.options) == DType::kI8;
    MLA_RETURN_IF_ERROR(mla_decode_batch(p, pool, m.options.backend));
    for (size_t i = 0; i < n; ++i)
      std::memcpy(out + first_token[decode[i]] * H * d_v, &od[i * H * d_v],
                  sizeof(float) * H * d_v);
    if (layer == 0) stats->decode_tokens += int(n);
  }
  for (size_t s = 0; s < b.seqs.size(); ++s) {
    const ForwardSeq& sq = b.seqs[s];
    if (sq.n_tokens == 1) continue;
    float* lse = grown(lse_buf, size_t(H) * sq.n_tokens);
    MlaAttentionParams p;
    p.s_q = sq.n_tokens;
    p.d_r = c.qk_rope_head_dim;
    p.q = q + first_token[s] * H * d_qk;
    const int32_t kv_len = int32_t(sq.start + sq.n_tokens);
    p.cache = layer_cache(sq.block_table.data(), int(sq.block_table.size()), &kv_len);
    p.w = &L.absorbed;
    p.softmax_scale = m.softmax_scale;
    p.causal = true;
    p.prefill_absorption_threshold = m.options.prefill_absorption_threshold;
    p.prefill_path_rule = m.options.prefill_path_rule;
    p.absorbed_q_dtype = m.options.attention_q_dtype;
    p.decompressed_dtype = prefill_attention_dtype(m.options);
    p.out = out + first_token[s] * H * d_v;
    p.lse = lse;
    MLA_ASSIGN_OR_RETURN(MlaPath path, mla_attention(p, pool, m.options.backend));
    if (layer == 0)
      ++(path == MlaPath::kAbsorbed ? stats->absorbed_chunks : stats->decompressed_chunks);
  }
  return Status();
}

// One decoder layer over h [T, D], in place. With `keep` (the last layer of a pass whose later
// stages read only some rows: each sequence's last token), every token's latent row still goes
// to the cache, but the query side (q, attention, o_proj, the FFN) runs on the kept rows alone,
// one per sequence, and the other rows of h are left as they came in. In a 512-token prefill of
// a 27-layer model that is 1/27 of the products; llama.cpp's graphs prune the last layer alike.
Status decoder_layer(const Model::Impl& m, int layer, const ForwardBatch& b,
                     const std::vector<TokenPlace>& place, const std::vector<int64_t>& first_token,
                     const std::vector<int64_t>& positions, const std::vector<int64_t>* keep,
                     KvCacheStorage& cache, float* h, ThreadPool& pool, ForwardStats* stats) {
  const ModelConfig& c = m.weights.config;
  const LayerRuntime& L = m.layers[size_t(layer)];
  const std::string& be = m.options.backend;
  const int64_t T = int64_t(place.size());
  const int D = c.hidden_size, H = m.heads, d_qk = c.d_qk();  // this rank's heads
  const int r = c.kv_lora_rank, d_r = c.qk_rope_head_dim, d_n = c.qk_nope_head_dim;
  const float eps = float(c.rms_norm_eps);

  // Activations, kept between layers and calls (grown(), model_impl.h).
  static thread_local AlignedBuffer<float> x_buf, q_buf, cq_buf, kv_buf, attn_buf, o_buf;
  float* x = grown(x_buf, size_t(T) * D);
  rms_norm(h, L.input_norm.data(), T, D, eps, D, D, x);

  // Query [T, H, d_qk]: q_nope | q_pe per head; latent row [T, r + d_r]: normalised c_kv (the
  // norm covers only the r latent values) | k_pe. The products of x (q_a or q_proj, and kv_a)
  // go through one pass: one wake of the pool in decode, one BF16 panel of x in prefill.
  // Rows of the query side: Q = T, or the kept rows (x_rows of the query's products).
  const int64_t Q = keep ? int64_t(keep->size()) : T;
  const int64_t* q_rows = keep ? keep->data() : nullptr;
  float* q = grown(q_buf, size_t(Q) * H * d_qk);
  float* kv = grown(kv_buf, size_t(T) * (r + d_r));
  float* cq = c.has_q_lora() ? grown(cq_buf, size_t(Q) * c.q_lora_rank) : nullptr;
  const LinearJob of_x[2] = {c.has_q_lora()
                                 ? LinearJob{&L.q_a, Q, x, cq, nullptr, nullptr, q_rows}
                                 : LinearJob{&L.q_proj, Q, x, q, nullptr, nullptr, q_rows},
                             {&L.kv_a, T, x, kv}};
  MLA_RETURN_IF_ERROR(linear_many(of_x, pool, be, m.options.matmul_dtype));
  if (c.has_q_lora()) {
    rms_norm(cq, L.q_a_norm.data(), Q, c.q_lora_rank, m.latent_norm_eps, c.q_lora_rank,
             c.q_lora_rank, cq);
    MLA_RETURN_IF_ERROR(linear(L.q_b, Q, cq, q, pool, be, m.options.matmul_dtype));
  }
  rms_norm(kv, L.kv_a_norm.data(), T, r, m.latent_norm_eps, r + d_r, r + d_r, kv);
  MLA_RETURN_IF_ERROR(rope_apply_f32(m.rope, positions.data(), int(T), 1, r + d_r, r, kv));
  // The kept rows' positions and the batch their attention sees: each sequence's last token as
  // a one-token chunk at its position (the cache then holds every row it attends to).
  static thread_local std::vector<int64_t> q_pos, q_first;
  ForwardBatch kept;
  if (keep) {
    q_pos.clear();
    q_first.clear();
    for (size_t s = 0; s < b.seqs.size(); ++s) {
      const ForwardSeq& sq = b.seqs[s];
      q_pos.push_back(sq.start + sq.n_tokens - 1);
      q_first.push_back(int64_t(s));
      kept.seqs.push_back({sq.block_table, sq.start + sq.n_tokens - 1, 1});
    }
  }
  MLA_RETURN_IF_ERROR(
      rope_apply_f32(m.rope, keep ? q_pos.data() : positions.data(), int(Q), H, d_qk, d_n, q));

  // The cache stores the normalised latent and the rotated k_pe.
  const float gscale = kNvfp4DefaultGlobalScale;
  const int ps = cache.page_size();
  for (int64_t t = 0; t < T; ++t) {
    const ForwardSeq& sq = b.seqs[size_t(place[t].seq)];
    const int64_t pos = place[t].pos;
    uint8_t* row = cache.row(layer, sq.block_table[size_t(pos / ps)], int(pos % ps));
    quantize_kv_row(m.options.kv_dtype, r, d_r, kv + size_t(t) * (r + d_r), gscale, row);
  }

  float* attn = grown(attn_buf, size_t(Q) * H * c.v_head_dim);
  MLA_RETURN_IF_ERROR(attention(m, L, keep ? kept : b, keep ? q_first : first_token, cache, layer,
                                q, attn, pool, stats));
  const size_t n_o = size_t(Q) * D;
  float* o = grown(o_buf, n_o);
  MLA_RETURN_IF_ERROR(linear(L.o_proj, Q, attn, o, pool, be, m.options.matmul_dtype));
  // Across ranks o holds this rank's heads' share of o_proj (its columns): the sum is the layer's.
  if (m.comm) m.comm->all_reduce_sum(o, n_o);
  const float rs = m.residual_scale;  // 1 but for MiniCPM3: x · 1 is exact
  // h row of query-side row i.
  auto h_row = [&](int64_t i) { return h + (keep ? (*keep)[size_t(i)] : i) * D; };
  for (int64_t i = 0; i < Q; ++i)
    for (int j = 0; j < D; ++j) h_row(i)[j] += o[i * D + j] * rs;

  for (int64_t i = 0; i < Q; ++i)
    rms_norm(h_row(i), L.post_norm.data(), 1, D, eps, D, D, x + i * D);
  std::fill(o, o + n_o, 0.0f);
  MLA_RETURN_IF_ERROR(run_ffn(m, L, Q, x, o, pool));
  if (m.comm) m.comm->all_reduce_sum(o, n_o);  // this rank's experts and FFN columns
  for (int64_t i = 0; i < Q; ++i)
    for (int j = 0; j < D; ++j) h_row(i)[j] += o[i * D + j] * rs;
  return Status();
}

}  // namespace

Status check_forward(const Model::Impl& m, const ForwardBatch& b, const KvCacheStorage& cache) {
  const ModelConfig& c = m.weights.config;
  if (cache.num_layers() != c.num_hidden_layers ||
      cache.record_bytes() !=
          kv_bytes_per_token(m.options.kv_dtype, c.kv_lora_rank, c.qk_rope_head_dim))
    return invalid_argument("forward: the KV cache was not made for this model (cache_shape)");
  return check_batch(m, b, cache.page_size(), cache.num_blocks());
}

Result<ForwardStats> forward_local(const Model::Impl& m, const ForwardBatch& b,
                                   KvCacheStorage& cache, ThreadPool& pool,
                                   std::vector<float>& logits) {
  const ModelConfig& c = m.weights.config;
  const int64_t T = int64_t(b.tokens.size());
  const int D = c.hidden_size;
  std::vector<TokenPlace> place;
  std::vector<int64_t> positions, first_token;
  place.reserve(size_t(T));
  for (size_t s = 0; s < b.seqs.size(); ++s) {
    first_token.push_back(int64_t(place.size()));
    for (int i = 0; i < b.seqs[s].n_tokens; ++i) {
      place.push_back({int(s), b.seqs[s].start + i});
      positions.push_back(b.seqs[s].start + i);
    }
  }
  std::vector<float> h(size_t(T) * D);
  for (int64_t t = 0; t < T; ++t)
    widen_elements(m.embed.dtype, m.embed.data, int64_t(b.tokens[size_t(t)]) * D, D, &h[t * D]);
  if (m.embed_scale != 1.0f)
    for (float& v : h) v *= m.embed_scale;

  // Rows whose logits are wanted.
  std::vector<int64_t> rows;
  for (size_t s = 0; s < b.seqs.size(); ++s) {
    if (b.all_logits)
      for (int i = 0; i < b.seqs[s].n_tokens; ++i) rows.push_back(first_token[s] + i);
    else
      rows.push_back(first_token[s] + b.seqs[s].n_tokens - 1);
  }
  // The last layer runs its query side on those rows alone, unless every row's hidden state is
  // asked for, or it is the first layer (whose chunks' paths the stats report).
  const int last = c.num_hidden_layers - 1;
  const bool prune = int64_t(rows.size()) < T && !b.hidden_dump && last > 0;

  ForwardStats stats;
  if (b.hidden_dump) b.hidden_dump->assign(size_t(c.num_hidden_layers), {});
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    MLA_RETURN_IF_ERROR(decoder_layer(m, l, b, place, first_token, positions,
                                      prune && l == last ? &rows : nullptr, cache, h.data(), pool,
                                      &stats));
    if (b.hidden_dump) (*b.hidden_dump)[size_t(l)] = h;
  }

  // Final norm, lm_head.
  std::vector<float> x(rows.size() * size_t(D));
  for (size_t i = 0; i < rows.size(); ++i)
    rms_norm(&h[size_t(rows[i]) * D], m.final_norm.data(), 1, D, float(c.rms_norm_eps), D, D,
             &x[i * D]);
  if (m.logits_divisor != 1.0f)
    for (float& v : x) v /= m.logits_divisor;
  const int64_t R = int64_t(rows.size()), V = c.vocab_size;
  if (!m.comm) {
    logits.resize(size_t(R * V));
    MLA_RETURN_IF_ERROR(linear(m.lm_head, R, x.data(), logits.data(), pool, m.options.backend,
                               m.options.matmul_dtype));
    return stats;
  }
  // Across ranks each holds lm_head rows [Σ vocab_counts[< rank], + vocab_counts[rank]): its
  // logits [R, V_rank] go to the leader, which interleaves them into [R, V].
  static thread_local std::vector<float> part, all;
  part.resize(size_t(R * m.lm_head.out));
  MLA_RETURN_IF_ERROR(
      linear(m.lm_head, R, x.data(), part.data(), pool, m.options.backend, m.options.matmul_dtype));
  std::vector<int64_t> counts(m.vocab_counts.size());
  for (size_t r = 0; r < counts.size(); ++r) counts[r] = R * m.vocab_counts[r];
  if (m.comm->leader()) all.resize(size_t(R * V));
  m.comm->gather(part.data(), counts, all.data());
  if (!m.comm->leader()) return stats;
  logits.resize(size_t(R * V));
  int64_t at = 0, v0 = 0;
  for (const int64_t n : m.vocab_counts) {
    for (int64_t i = 0; i < R; ++i)
      std::copy_n(&all[size_t(at + i * n)], n, &logits[size_t(i * V + v0)]);
    at += R * n;
    v0 += n;
  }
  return stats;
}

}  // namespace mla
