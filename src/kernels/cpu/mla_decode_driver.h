// The absorbed-decode driver: splits (sequence, row block, key range) work across threads, walks
// the paged cache tile by tile through a Tile policy (which owns the data layout and the two
// products), and merges key-range partial results by their LSE. Include inside the ISA's
// `#pragma GCC target` region, after the Vec type. Internal linkage.
//
// Tile policy interface (one object per thread, reused across calls):
//   void begin(const MlaDecodeParams&)                      sizes scratch for these dims
//   void prepare_q(const MlaDecodeParams&, int b, int r0, int R)   rows r0.. of sequence b
//   void load_tile(const MlaDecodeParams&, int b, int t0, int n)   keys t0 .. t0+n-1 (n ≤ kKeys)
//   static constexpr int kKeys                               optional: keys per step (kTile)
//   void scores(float* ST)                                   ST [kKeys][ld] = q·k (unscaled)
//   void pv(const float* P, int R, int n, const float* corr, RowBlockState st)
//   int d_v_pad() const                                      O row stride (≥ d_v; pv_tile wants a
//                                                            multiple of 4·W)
//   static constexpr int kRowBlock                           rows per work item
//   void end_item()                                          optional: after a work item's tiles
//   void unpermute_o(int R, RowBlockState)                   optional: O's channels into order
//                                                            (a P·V that leaves them permuted)
#pragma once

#include <cmath>
#include <limits>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/attention_tile.h"
#include "kernels/cpu/load_f32.h"
#include "kernels/cpu/scratch.h"
#include "kernels/mla_params.h"

namespace mla::cpu {
namespace {

// Heads × queries per work item unless the Tile policy says otherwise (Tile::kRowBlock): the O
// block 64 × 512 fp32 is 128 KiB.
constexpr int kDecodeRowBlock = 64;

// Address of key t of sequence b in the paged cache, as bytes.
inline const uint8_t* cache_row(const MlaDecodeParams& p, int b, int t, int64_t row_bytes) {
  const int32_t page =
      p.cache.block_table[int64_t(b) * p.cache.max_blocks_per_seq + t / p.cache.page_size];
  const int64_t slot = int64_t(page) * p.cache.page_size + t % p.cache.page_size;
  return static_cast<const uint8_t*>(p.cache.rows) + slot * row_bytes;
}

// Per-thread buffers of one work item (sized by the row block, not by the context).
struct DecodeScratch {
  AlignedBuffer<float> o, s, m, l, corr, lse, limit;
  std::vector<float*> score_rows, tile_score_rows;
};

struct DecodeSplit {
  std::vector<int> splits;        // [b] key ranges per sequence
  std::vector<int> tiles_per;     // [b] tiles per key range
  std::vector<int64_t> part_off;  // [b] first partial row of the sequence (when splits > 1)
  int64_t num_items = 0;
  int row_blocks = 0;
  int64_t part_rows = 0;
};

// Aims for ~4 items per thread of equal (tiles × rows) so that a lone long sequence is split
// across threads by key range and many short ones are spread by sequence.
// Key ranges are whole steps of step_tiles tiles where that does not leave a thread idle.
// d's vectors keep their capacity between calls.
inline void plan_decode(const MlaDecodeParams& p, int threads, int row_block, int step_tiles,
                        DecodeSplit* out) {
  DecodeSplit& d = *out;
  d.num_items = 0;
  d.part_rows = 0;
  const int rows = p.s_q * p.h_q;
  d.row_blocks = (rows + row_block - 1) / row_block;
  int64_t total_tiles = 0;
  for (int b = 0; b < p.b; ++b) total_tiles += (p.cache.seq_lens[b] + kTile - 1) / kTile;
  const int64_t target_items = int64_t(4) * threads;
  const int64_t per_item =
      std::max<int64_t>(1, (total_tiles * d.row_blocks + target_items - 1) / target_items);
  d.splits.resize(p.b);
  d.tiles_per.resize(p.b);
  d.part_off.resize(p.b);
  for (int b = 0; b < p.b; ++b) {
    const int64_t tiles = (p.cache.seq_lens[b] + kTile - 1) / kTile;
    const int64_t want = std::max<int64_t>(1, tiles / per_item);  // key ranges for this sequence
    int64_t tp = std::max<int64_t>(1, (tiles + want - 1) / want);
    if (tp > step_tiles) tp = (tp + step_tiles - 1) / step_tiles * step_tiles;
    d.tiles_per[b] = int(tp);
    d.splits[b] = int(std::max<int64_t>(1, (tiles + tp - 1) / tp));
    d.part_off[b] = d.part_rows;
    if (d.splits[b] > 1) d.part_rows += int64_t(d.splits[b]) * rows;
    d.num_items += int64_t(d.splits[b]) * d.row_blocks;
  }
}

// Keys a Tile policy takes per step: Tile::kKeys (a multiple of kTile) when it says, else kTile.
template <class Tile>
constexpr int tile_keys() {
  if constexpr (requires { Tile::kKeys; }) {
    static_assert(Tile::kKeys % kTile == 0, "steps of whole tiles");
    return Tile::kKeys;
  }
  return kTile;
}

template <class V, class Tile>
void run_mla_decode(const MlaDecodeParams& p, ThreadPool& pool) {
  if (p.b == 0) return;
  const int rows = p.s_q * p.h_q;
  constexpr int kRowBlock = Tile::kRowBlock, kKeys = tile_keys<Tile>();
  // The plan and the key-range partials, kept between calls on the calling thread (local
  // references: a lambda run on a worker would name the worker's own thread_locals).
  struct Buffers {
    DecodeSplit plan;
    AlignedBuffer<float> part_o, part_lse;
    std::vector<int64_t> first_item;
    std::vector<int> split_batches;
  };
  static thread_local Buffers buffers;
  Buffers& bufs = buffers;
  const DecodeSplit& plan = bufs.plan;
  plan_decode(p, pool.num_threads(), kRowBlock, kKeys / kTile, &bufs.plan);
  float* part_o = ensure_scratch(bufs.part_o, size_t(plan.part_rows) * p.d_v);
  float* part_lse = ensure_scratch(bufs.part_lse, size_t(plan.part_rows));
  // item → (b, split, row block): prefix sums over b.
  std::vector<int64_t>& first_item = bufs.first_item;
  first_item.assign(size_t(p.b) + 1, 0);
  for (int b = 0; b < p.b; ++b)
    first_item[b + 1] = first_item[b] + int64_t(plan.splits[b]) * plan.row_blocks;

  pool.parallel_for(plan.num_items, [&](int64_t item, int) {
    const int b =
        int(std::upper_bound(first_item.begin(), first_item.end(), item) - first_item.begin()) - 1;
    const int64_t local = item - first_item[b];
    const int split = int(local / plan.row_blocks), rb = int(local % plan.row_blocks);
    const int r0 = rb * kRowBlock, R = std::min(kRowBlock, rows - r0);
    const int s_kv = p.cache.seq_lens[b];
    const int tile_begin = split * plan.tiles_per[b];
    const int tile_end = std::min((s_kv + kTile - 1) / kTile, tile_begin + plan.tiles_per[b]);

    static thread_local Tile tile;
    static thread_local DecodeScratch sc;
    tile.begin(p);
    const int ld_o = tile.d_v_pad(), ld = Tile::rows_pad(R);
    // O has ld rows (R padded to the vector width) so that a tile may update padding rows too.
    RowBlockState st{ensure_scratch(sc.o, size_t(ld) * ld_o), ld_o, ensure_scratch(sc.m, ld),
                     ensure_scratch(sc.l, ld)};
    float* corr = ensure_scratch(sc.corr, ld);
    float* lse_rows = ensure_scratch(sc.lse, ld);
    float* limit = ensure_scratch(sc.limit, ld);  // keys visible per row in the tile, as floats
    float* ST = ensure_scratch(sc.s, size_t(kKeys) * ld);
    sc.score_rows.assign(R, nullptr);
    sc.tile_score_rows.assign(R, nullptr);
    std::fill(st.o, st.o + size_t(ld) * ld_o, 0.0f);
    std::fill(st.m, st.m + ld, kNegInf);
    std::fill(st.l, st.l + ld, 0.0f);
    std::fill(limit, limit + ld, 0.0f);
    if (p.scores)
      for (int i = 0; i < R; ++i)
        sc.score_rows[i] = p.scores + (int64_t(b) * rows + r0 + i) * p.scores_stride;

    tile.prepare_q(p, b, r0, R);
    const int key_end = std::min(s_kv, tile_end * kTile);
    for (int tt = tile_begin; tt < tile_end; tt += kKeys / kTile) {
      const int t0 = tt * kTile, n = std::min(kKeys, key_end - t0);
      bool any = false;
      for (int i = 0; i < R; ++i) {
        const int s = (r0 + i) / p.h_q;
        const int lim = std::clamp(visible_keys(s_kv, p.s_q, s, p.causal) - t0, 0, n);
        limit[i] = float(lim);
        any |= lim > 0;
      }
      if (!any && !p.scores) continue;
      tile.load_tile(p, b, t0, n);
      tile.scores(ST);
      if (p.scores)
        for (int i = 0; i < R; ++i) sc.tile_score_rows[i] = sc.score_rows[i] + t0;
      softmax_tile_rows<V>(ST, ld, R, limit, n, p.softmax_scale, st, corr,
                           p.scores ? sc.tile_score_rows.data() : nullptr,
                           std::min(kKeys, round_up(n, kTile)));  // rows past n: masked
      tile.pv(ST, R, n, corr, st);
    }
    if constexpr (requires { tile.end_item(); }) tile.end_item();  // e.g. release AMX state
    if constexpr (requires { tile.unpermute_o(R, st); }) tile.unpermute_o(R, st);  // O in order

    if (plan.splits[b] == 1) {
      float* out = p.out + (int64_t(b) * rows + r0) * p.d_v;
      finish_rows(R, p.d_v, st, out, p.d_v, lse_rows);
      for (int i = 0; i < R; ++i) {
        const int r = r0 + i, s = r / p.h_q, h = r % p.h_q;
        // A row that saw no key: out 0, lse +inf (the FlashMLA convention).
        p.lse[(int64_t(b) * p.h_q + h) * p.s_q + s] =
            lse_rows[i] == kNegInf ? -kNegInf : lse_rows[i];
      }
    } else {
      const int64_t base = plan.part_off[b] + int64_t(split) * rows + r0;
      finish_rows(R, p.d_v, st, part_o + base * p.d_v, p.d_v, part_lse + base);
    }
  });

  if (plan.part_rows == 0) return;
  // Merge the key-range partials of split sequences: lse = ln Σ e^lse_k, out = Σ e^(lse_k − lse)
  // o_k.
  std::vector<int>& split_batches = bufs.split_batches;
  split_batches.clear();
  for (int b = 0; b < p.b; ++b)
    if (plan.splits[b] > 1) split_batches.push_back(b);
  pool.parallel_for(int64_t(split_batches.size()) * rows, [&](int64_t item, int) {
    const int b = split_batches[item / rows], r = int(item % rows);
    const int ns = plan.splits[b];
    const float* lse_k = part_lse + plan.part_off[b] + r;  // stride rows
    float mx = kNegInf;
    bool nan = false;  // a NaN partial makes the row NaN, as it would without the split
    for (int k = 0; k < ns; ++k) {
      const float x = lse_k[int64_t(k) * rows];
      nan |= std::isnan(x);
      mx = std::max(mx, x);
    }
    float* out = p.out + (int64_t(b) * rows + r) * p.d_v;
    const int s = r / p.h_q, h = r % p.h_q;
    float& lse = p.lse[(int64_t(b) * p.h_q + h) * p.s_q + s];
    if (nan) {
      std::fill(out, out + p.d_v, std::numeric_limits<float>::quiet_NaN());
      lse = std::numeric_limits<float>::quiet_NaN();
      return;
    }
    if (mx == kNegInf) {
      std::fill(out, out + p.d_v, 0.0f);
      lse = -kNegInf;
      return;
    }
    float sum = 0.0f;
    for (int k = 0; k < ns; ++k) sum += std::exp(lse_k[int64_t(k) * rows] - mx);
    const float total = mx + std::log(sum);
    std::fill(out, out + p.d_v, 0.0f);
    for (int k = 0; k < ns; ++k) {
      const float w = std::exp(lse_k[int64_t(k) * rows] - total);
      if (w == 0.0f) continue;
      const float* o_k = part_o + (plan.part_off[b] + int64_t(k) * rows + r) * p.d_v;
      for (int c = 0; c < p.d_v; ++c) out[c] += w * o_k[c];
    }
    lse = total;
  });
}

}  // namespace
}  // namespace mla::cpu
