// The decompressed prefill driver: walks the cached context in chunks of kPrefillChunk tokens,
// up-projects each chunk's latent rows to per-head K and V with one weight product each (on the
// linear variant the registry passes in, on the pool's threads: FP32 products, or the BF16 GEMM
// when attention_dtype is BF16), then
// runs the FP32 attention tiles per (head, query block), carrying the online-softmax state across
// chunks. Workspace is bounded by the chunk (≈ kPrefillChunk · H · (d_n + d_v) floats), not the
// context. Include inside the ISA's target region after the Vec type. Internal linkage.
#pragma once

#include "kernels/cpu/attention_tile.h"
#include "kernels/cpu/load_f32.h"
#include "kernels/cpu/scratch.h"
#include "kernels/linear.h"

namespace mla::cpu {
namespace {

// Context tokens up-projected at once: each chunk re-reads W_UK / W_UV (16 MB in FP32 at V2-Lite)
// and passes over every row block's running output O (16 MB at 2,048 queries). 512 against 256:
// M 2,048 over L 2,048 (`mla bench prefill --path decompressed`, 3 alternated runs) 253.4 /
// 256.3 / 251.9 -> 241.0 / 247.9 / 251.8 ms; 1,024 gave no more. Workspace grows with it: V3's
// FP32 K and V of a chunk are 67 MB.
constexpr int kPrefillChunk = 512;
constexpr int kPrefillRowBlock = 128;  // queries of one head per work item

// What the driver keeps per thread for a work item: scores / probabilities, corr, limits.
struct PrefillRowScratch {
  AlignedBuffer<float> s, corr, limit;
  std::vector<float*> score_rows;
};

// ST [kTile][ld] = scores of the head's query block against keys [k_nope (d_n) | k_pe (d_r)],
// the two parts read from their own buffers: rows are the lanes, each key value is broadcast.
template <class V, int NV>
void prefill_score_keys(const float* qT, int ld, int d_n, int d_r, const float* const* knope,
                        const float* const* kpe, float* ST) {
  constexpr int NK = keys_per_block<V, NV>();
  for (int j0 = 0; j0 < kTile; j0 += NK) {
    float* out = ST + int64_t(j0) * ld;
    score_block_rows_f32<V, NV, NK>(qT, ld, d_n, knope + j0, out);
    if (d_r > 0)
      score_block_rows_f32<V, NV, NK, true>(qT + int64_t(d_n) * ld, ld, d_r, kpe + j0, out);
  }
}

// y [n, out] = x [n, in] · Wᵀ for an FP32 W [out, in], on `linear` (the run() of the best linear
// variant of this CPU, which the registry passes to the prefill variants): FP32 products, or BF16
// ones (dtype kBF16, and kI8 whose tiles quantise the FP32 result: linear path kBf16).
inline void up_project(LinearRunFn linear, const float* w, int64_t out, int64_t in, int64_t n,
                       const float* x, float* y, DType dtype, ThreadPool& pool) {
  LinearWeight lw;
  lw.dtype = DType::kF32;
  lw.data = reinterpret_cast<const uint8_t*>(w);
  lw.out = out;
  lw.in = in;
  const LinearJob job{&lw, n, x, y};
  linear(LinearParams{{&job, 1}, dtype == DType::kF32 ? LinearPath::kAuto : LinearPath::kBf16},
         pool);
}

// The FP32 tiles: Q·Kᵀ with the query rows as lanes and each key value broadcast, P·V in FP32.
// A tile policy gives the driver: kKeyStep (keys per online-softmax step, a multiple of kTile
// and at most kPrefillChunk), q_words() and prepare_q() (a row block's queries of one head in
// the tiles' layout, QWord elements, made once per call: the same block meets every chunk),
// chunk() (the chunk's up-projected K and V, once per chunk), and per work item (thread-local
// Scratch) scores() of up to kKeyStep keys (whole kTile blocks of ST, zero keys past n) and
// pv().
template <class V>
struct PrefillTileF32 {
  static constexpr int W = V::kWidth;
  static constexpr int kKeyStep = kTile;  // keys per softmax step
  using QWord = float;
  struct Scratch {
    AlignedBuffer<float> zero;
  };
  const MlaPrefillParams* p = nullptr;
  const float *knope = nullptr, *kpe = nullptr, *v = nullptr;
  int64_t ld_k = 0, ld_v = 0;
  int dv_pad = 0;

  void begin(const MlaPrefillParams& params) {
    p = &params;
    ld_k = int64_t(p->h_q) * p->d_n;
    ld_v = int64_t(p->h_q) * p->d_v;
    dv_pad = round_up(p->d_v, 4 * W);
  }
  void chunk(int, const float* kn, const float* kp, const float* vv, ThreadPool&) {
    knope = kn;
    kpe = kp;
    v = vv;
  }
  // Words of one row block's prepared queries, ld lanes at most.
  int64_t q_words(int ld) const { return int64_t(p->d_n + p->d_r) * ld; }
  // qT [d_qk][ld]: the block's queries of head h, transposed (padding lanes zero).
  void prepare_q(float* qT, int h, int s0, int R, int ld) const {
    const int d_qk = p->d_n + p->d_r;
    std::fill(qT, qT + size_t(d_qk) * ld, 0.0f);
    for (int i = 0; i < R; ++i) {
      const float* q = p->q + (int64_t(s0 + i) * p->h_q + h) * d_qk;
      for (int ch = 0; ch < d_qk; ++ch) qT[int64_t(ch) * ld + i] = q[ch];
    }
  }
  // ST [kTile][ld] = scores of keys tok0 .. tok0 + n of the chunk (zero keys past n).
  void scores(Scratch& sc, const float* qT, int h, int tok0, int n, int ld, float* ST) const {
    const float* zero = ensure_scratch(sc.zero, size_t(std::max(p->d_n, p->d_r)));
    const float* knope_rows[kTile];
    const float* kpe_rows[kTile];
    for (int j = 0; j < kTile; ++j) {
      knope_rows[j] = j < n ? knope + (tok0 + j) * ld_k + int64_t(h) * p->d_n : zero;
      kpe_rows[j] = j < n ? kpe + int64_t(tok0 + j) * p->d_r : zero;
    }
    for (int vv = 0; vv < ld;) {
      const int nv = std::min(4, (ld - vv) / W);
      const float* q0 = qT + vv;
      float* out = ST + vv;
      switch (nv) {
        case 4:
          prefill_score_keys<V, 4>(q0, ld, p->d_n, p->d_r, knope_rows, kpe_rows, out);
          break;
        case 3:
          prefill_score_keys<V, 3>(q0, ld, p->d_n, p->d_r, knope_rows, kpe_rows, out);
          break;
        case 2:
          prefill_score_keys<V, 2>(q0, ld, p->d_n, p->d_r, knope_rows, kpe_rows, out);
          break;
        default:
          prefill_score_keys<V, 1>(q0, ld, p->d_n, p->d_r, knope_rows, kpe_rows, out);
          break;
      }
      vv += nv * W;
    }
  }
  // O = O·corr + P·V over those keys (P = ST, key-major).
  void pv(Scratch&, int h, int tok0, int n, const float* ST, int R, int ld, const float* corr,
          RowBlockState st) const {
    pv_tile<V>(ST, R, n, v + tok0 * ld_v + int64_t(h) * p->d_v, ld_v, dv_pad, corr, st,
               /*p_row=*/1, /*p_key=*/ld);
  }
};

// P·V of a row block in groups of 4 query rows (then single rows) per 64 channels: rows(i, ch)
// is a generic lambda, called as rows.template operator()<NR>(i, ch) for NR = 4 or 1. O [R][dv_pad]
// of the block (64 KiB at 128 rows) was last touched a whole chunk earlier, every other block's O
// in between (16 MB at 2,048 tokens): its lines come from DRAM. Each 4-row group requests the
// lines of the group two ahead (a group's 512 dot products cover the latency; without it their
// loads were a sixth of P·V's samples). (All 4 rows even past R: a prefetch never faults. GCC 12
// drops every prefetch of this loop when its bound is min(i + 4, R).)
template <class Rows>
inline void pv_in_row_groups(int R, int dv_pad, const RowBlockState& st, Rows&& rows) {
  auto ahead = [&](int i, int ch) {
    for (int r = i; r < i + 4; ++r)
      for (int c = 0; c < 64; c += 16)
        _mm_prefetch(reinterpret_cast<const char*>(st.o + int64_t(r) * st.ld_o + ch + c),
                     _MM_HINT_T0);
  };
  const int groups = (R + 3) / 4;
  for (int g = 0; g < 2 && g < groups; ++g) ahead(4 * g, 0);
  for (int ch = 0; ch < dv_pad; ch += 64) {
    int i = 0;
    for (; i + 4 <= R; i += 4) {
      const int g = i / 4 + 2;  // the group two ahead, into the next channel block
      if (g < groups)
        ahead(4 * g, ch);
      else if (ch + 64 < dv_pad)
        ahead(4 * (g - groups), ch + 64);
      rows.template operator()<4>(i, ch);
    }
    for (; i < R; ++i) rows.template operator()<1>(i, ch);
  }
}

template <class V, class Tile = PrefillTileF32<V>>
void run_mla_prefill(const MlaPrefillParams& p, ThreadPool& pool, LinearRunFn linear) {
  const int H = p.h_q, r = p.r;
  const int dv_pad = round_up(p.d_v, 4 * V::kWidth);
  const int row_blocks = (p.s_q + kPrefillRowBlock - 1) / kPrefillRowBlock;
  const int64_t ld_k = int64_t(H) * p.d_n, ld_v = int64_t(H) * p.d_v;
  const CacheRowFormat fmt(p.cache.dtype, r, p.d_r, p.cache.global_scale);
  Tile tile;
  tile.begin(p);

  // c [chunk][r], kpe [chunk][d_r], knope [chunk][H·d_n], v [chunk][H·d_v] (+ dv_pad so the last
  // head's padded V loads stay inside the buffer). Online-softmax state per (head, query):
  // o [H][s_q][dv_pad]; m and l [H][sq_pad], padded to whole vectors so a row block's lanes past
  // s_q stay inside its head. The calling thread's buffers, kept between calls as the tiles' K
  // and V are: at V3's 128 heads knope, v and o (134 MB at 2,048 queries) are past glibc's
  // largest mmap threshold (32 MB), so fresh ones were mapped, faulted in and zeroed per call.
  constexpr int W = V::kWidth;
  const int sq_pad = round_up(p.s_q, W);
  struct Buffers {
    AlignedBuffer<float> c, kpe, knope, v, o, m, l;
  };
  static thread_local Buffers buf;
  float* c = ensure_scratch(buf.c, size_t(kPrefillChunk) * r);
  float* kpe = ensure_scratch(buf.kpe, size_t(kPrefillChunk) * std::max(p.d_r, 1));
  float* knope = ensure_scratch(buf.knope, size_t(kPrefillChunk) * ld_k);
  float* v = ensure_scratch(buf.v, size_t(kPrefillChunk) * ld_v + dv_pad);
  float* o = ensure_scratch(buf.o, size_t(H) * p.s_q * dv_pad);
  float* m = ensure_scratch(buf.m, size_t(H) * sq_pad);
  float* l = ensure_scratch(buf.l, size_t(H) * sq_pad);
  // Every (head, row block)'s queries in the tiles' layout, [H][row_blocks][q_item], made once
  // (remade per chunk, the transposition had been 20% of the attention at 4,096 tokens), and its
  // softmax state cleared, in one pass on the pool.
  using QWord = typename Tile::QWord;
  const int64_t q_item = tile.q_words(round_up(std::min(kPrefillRowBlock, p.s_q), W));
  static thread_local AlignedBuffer<QWord> qs_buf;
  QWord* qs = ensure_scratch(qs_buf, size_t(int64_t(H) * row_blocks * q_item));
  pool.parallel_for(int64_t(H) * row_blocks, [&](int64_t item, int) {
    const int h = int(item / row_blocks), s0 = int(item % row_blocks) * kPrefillRowBlock;
    const int R = std::min(kPrefillRowBlock, p.s_q - s0);
    const int ld = round_up(R, W);
    tile.prepare_q(qs + item * q_item, h, s0, R, ld);
    float* o_item = o + (int64_t(h) * p.s_q + s0) * dv_pad;
    std::fill(o_item, o_item + int64_t(R) * dv_pad, 0.0f);
    std::fill(m + int64_t(h) * sq_pad + s0, m + int64_t(h) * sq_pad + s0 + ld, kNegInf);
    std::fill(l + int64_t(h) * sq_pad + s0, l + int64_t(h) * sq_pad + s0 + ld, 0.0f);
  });

  for (int c0 = 0; c0 < p.s_kv(); c0 += kPrefillChunk) {
    const int n_c = std::min(kPrefillChunk, p.s_kv() - c0);
    for (int j = 0; j < n_c; ++j) {
      const int t = c0 + j;
      const int64_t slot = int64_t(p.cache.block_table[t / p.cache.page_size]) * p.cache.page_size +
                           t % p.cache.page_size;
      // Only the gathered rows are dequantised.
      const uint8_t* row = static_cast<const uint8_t*>(p.cache.rows) + slot * fmt.row_bytes;
      load_cache_row(fmt, row, c + int64_t(j) * r, kpe + int64_t(j) * p.d_r);
    }
    // The FP32 tiles read the last head's V up to dv_pad: zeros, not an earlier chunk's values.
    std::fill(v + int64_t(n_c) * ld_v, v + int64_t(n_c) * ld_v + dv_pad, 0.0f);
    // knope = c · W_UKᵀ, v = c · W_UVᵀ with W_UK viewed as [H·d_n, r] and W_UV as [H·d_v, r].
    up_project(linear, p.w_uk, ld_k, r, n_c, c, knope, p.attention_dtype, pool);
    up_project(linear, p.w_uv, ld_v, r, n_c, c, v, p.attention_dtype, pool);
    tile.chunk(n_c, knope, kpe, v, pool);

    pool.parallel_for(int64_t(H) * row_blocks, [&](int64_t item, int) {
      const int h = int(item / row_blocks), s0 = int(item % row_blocks) * kPrefillRowBlock;
      const int R = std::min(kPrefillRowBlock, p.s_q - s0);
      const int ld = round_up(R, W);
      static thread_local typename Tile::Scratch tsc;
      static thread_local PrefillRowScratch sc;
      float* ST = ensure_scratch(sc.s, size_t(Tile::kKeyStep) * ld);
      float* corr = ensure_scratch(sc.corr, ld);
      float* limit = ensure_scratch(sc.limit, ld);
      sc.score_rows.assign(R, nullptr);
      const QWord* qT = qs + item * q_item;
      std::fill(limit, limit + ld, 0.0f);
      const RowBlockState st{o + (int64_t(h) * p.s_q + s0) * dv_pad, dv_pad,
                             m + int64_t(h) * sq_pad + s0, l + int64_t(h) * sq_pad + s0};
      // Keys the block's last row sees: no row of the block sees a key past them (causal).
      const int seen = visible_keys(p.s_kv(), p.s_q, s0 + R - 1, p.causal);
      for (int t0 = c0; t0 < c0 + n_c; t0 += Tile::kKeyStep) {
        int n = std::min(Tile::kKeyStep, c0 + n_c - t0);
        if (!p.scores) n = std::min(n, seen - t0);  // (checking writes every key's score)
        if (n <= 0) continue;
        for (int i = 0; i < R; ++i) {
          limit[i] = float(std::clamp(visible_keys(p.s_kv(), p.s_q, s0 + i, p.causal) - t0, 0, n));
          if (p.scores)
            sc.score_rows[i] = p.scores + (int64_t(s0 + i) * H + h) * p.scores_stride + t0;
        }
        tile.scores(tsc, qT, h, t0 - c0, n, ld, ST);
        softmax_tile_rows<V>(ST, ld, R, limit, n, p.softmax_scale, st, corr,
                             p.scores ? sc.score_rows.data() : nullptr, round_up(n, kTile));
        tile.pv(tsc, h, t0 - c0, n, ST, R, ld, corr, st);
      }
    });
  }

  pool.parallel_for(H, [&](int64_t h, int) {
    const RowBlockState st{o + h * p.s_q * dv_pad, dv_pad, m + h * sq_pad, l + h * sq_pad};
    float* lse = p.lse + h * p.s_q;
    finish_rows(p.s_q, p.d_v, st, p.out + h * p.d_v, int64_t(H) * p.d_v, lse);
    for (int s = 0; s < p.s_q; ++s)
      if (lse[s] == kNegInf) lse[s] = -kNegInf;  // no visible key: +inf, as in mla_decode
  });
}

}  // namespace
}  // namespace mla::cpu
