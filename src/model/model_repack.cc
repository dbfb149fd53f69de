// Weights re-laid at load into the layouts the CPU kernels run faster (RuntimeOptions::
// repack_weights), or requantised into Q8_0 blocks (RuntimeOptions::weight_dtype): one arena for
// all of them, each weight's file pages read once and dropped.
#include <fmt/format.h>

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

#include "cache/cache_capacity.h"
#include "io/mapped_file.h"
#include "model/model_impl.h"
#include "model/weight_requant.h"

namespace mla {
namespace {

// The pages of w's values and scales read in now, as Checkpoint::populate reads a whole file (w
// may also lie in memory of the process's own: then there is nothing to read).
Status populate_weight(const LinearWeight& w, const std::string& what) {
  if (!w.data) return Status();
  const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  auto read_in = [&](const uint8_t* p, uintptr_t n) {
    const uintptr_t a = uintptr_t(p) / page * page;
    return io_detail::populate_mapping(what, reinterpret_cast<void*>(a), uintptr_t(p) + n - a);
  };
  MLA_RETURN_IF_ERROR(read_in(w.data, uintptr_t(dtype_bytes(w.dtype, w.in) * w.out)));
  if (!w.scale_inv) return Status();
  return read_in(w.scale_inv, uintptr_t(linear_scale_grid_bytes(w)));
}

}  // namespace

Status repack_weights(Model::Impl& m, const std::string& dir) {
  const auto t0 = std::chrono::steady_clock::now();
  // Every weight linear() reads, by name; `exact` ones (the router, the per-head products) are
  // only re-laid, never requantised.
  struct Named {
    LinearWeight* w;
    std::string what;
    bool exact = false;
  };
  std::vector<Named> ws;
  for (size_t i = 0; i < m.layers.size(); ++i) {
    LayerRuntime& L = m.layers[i];
    const std::string at = fmt::format("{}: layer {} ", dir, i);
    for (auto [w, name] : {std::pair{&L.q_proj, "q_proj"},
                           {&L.q_a, "q_a_proj"},
                           {&L.q_b, "q_b_proj"},
                           {&L.kv_a, "kv_a_proj"},
                           {&L.o_proj, "o_proj"},
                           {&L.router, "router"}})
      ws.push_back({w, at + name, w == &L.router});
    // The absorbed path's per-head products (a GGUF file's attn_k_b / attn_v_b views, or the
    // per-head copies of kv_b_proj; FP32 ones keep their layout).
    for (size_t h = 0; h < L.absorbed.uk_t.size(); ++h) {
      ws.push_back({&L.absorbed.uk_t[h], at + fmt::format("attn_k_b head {}", h), true});
      ws.push_back({&L.absorbed.uv[h], at + fmt::format("attn_v_b head {}", h), true});
    }
    std::vector<MlpLinear*> mlps = {&L.mlp, &L.shared};
    for (MlpLinear& e : L.experts) mlps.push_back(&e);
    for (size_t k = 0; k < mlps.size(); ++k) {
      const std::string mlp = at + (k == 0   ? "mlp"
                                    : k == 1 ? "shared experts"
                                             : fmt::format("expert {}", k - 2));
      ws.push_back({&mlps[k]->gate, mlp + " gate_proj"});
      ws.push_back({&mlps[k]->up, mlp + " up_proj"});
      ws.push_back({&mlps[k]->down, mlp + " down_proj"});
    }
  }
  ws.push_back({&m.lm_head, dir + ": lm_head", m.options.lm_head_dtype.has_value()});
  // Which weights change layout, and where each goes in one arena (64-byte aligned offsets;
  // block scales copied beside the values).
  struct Step {
    size_t k;  // into ws
    DType to;
    bool requantize;
  };
  std::vector<Step> plan;
  std::vector<size_t> offset;
  size_t total = 0;
  const bool q8 = m.options.weight_dtype == DType::kQ8_0;
  for (size_t k = 0; k < ws.size(); ++k) {
    const LinearWeight& w = *ws[k].w;
    if (!w.data) continue;  // absent in this layer (q_proj with a q LoRA, a dense layer's router)
    if (q8 && !ws[k].exact && !dtype_is_ggml_block(w.dtype) && !dtype_is_row_interleaved(w.dtype) &&
        w.in % 32 == 0) {
      const DType to = m.options.repack_weights
                           ? linear_preferred_dtype(DType::kQ8_0, w.out, w.in, m.options.backend)
                           : DType::kQ8_0;
      plan.push_back({k, to, true});
      offset.push_back(total);
      total += q8_0_weight_bytes(w);
      continue;
    }
    if (!m.options.repack_weights) continue;
    const DType to = linear_preferred_dtype(w, m.options.backend);
    if (to == w.dtype) continue;
    plan.push_back({k, to, false});
    offset.push_back(total);
    total += repacked_weight_bytes(w);
  }
  if (plan.empty()) return m.ranks == 1 ? m.weights.checkpoint.populate({}) : Status();
  // Unlike the file's pages, the arena cannot be given back under memory pressure: a load that
  // does not fit would end in the OOM killer half way. (MemAvailable counts the page cache the
  // file's pages take as available; a meminfo that cannot be read skips the check.)
  if (const Result<uint64_t> avail = read_mem_available(m.options.meminfo_path);
      avail.ok() && uint64_t(total) + kRepackHeadroomBytes > *avail) {
    fmt::print(stderr,
               "warning: {}: the re-laid weights would take {:.1f} MB, and {:.1f} MB of memory is "
               "available ({:.0f} MB must stay free beside them): keeping the file's {} (as "
               "--repack off{}; decode and prefill run slower)\n",
               dir, double(total) / 1e6, double(*avail) / 1e6, double(kRepackHeadroomBytes) / 1e6,
               q8 ? "dtypes and layouts" : "layouts", q8 ? " without --weight-dtype" : "");
    m.repack_stats.skipped_for_memory = true;
    return m.ranks == 1 ? m.weights.checkpoint.populate({}) : Status();
  }
  MLA_ASSIGN_OR_RETURN(
      m.repacked, WeightArena::allocate(total, default_thread_pool(), dir + ": repacked weights"));
  std::vector<const uint8_t*> sources;
  for (size_t p = 0; p < plan.size(); ++p) {
    const auto& [k, to, requantize] = plan[p];
    LinearWeight*& w = ws[k].w;
    const std::string& what = ws[k].what;
    // The file's pages are dropped, unless the weight is a copy: lm_head requantised, or a
    // rank's slice (whose copy is freed instead, once every weight is repacked: the heads of a
    // layer's attn_k_b share one slice).
    const bool mapped = m.ranks == 1 && (w != &m.lm_head || !m.lm_head_store.data.data());
    if (m.ranks > 1) sources.push_back(w->data);
    m.repack_stats.weights += 1;
    m.repack_stats.requantized += requantize ? 1 : 0;
    m.repack_stats.bytes += int64_t(requantize ? q8_0_weight_bytes(*w) : repacked_weight_bytes(*w));
    uint8_t* dst = m.repacked.data() + offset[p];
    if (requantize) {
      MLA_ASSIGN_OR_RETURN(*w, requantize_q8_0(*w, to, default_thread_pool(), dst, what, mapped));
    } else {
      MLA_ASSIGN_OR_RETURN(*w, repack_weight(*w, to, default_thread_pool(), dst, what, mapped));
    }
  }
  for (const uint8_t* source : sources) m.slices.release(source);
  if (m.ranks == 1) {  // what decode still reads from the file, paged in as load_impl would have
    std::vector<bool> repacked(ws.size());
    for (const Step& st : plan) repacked[st.k] = true;
    for (size_t k = 0; k < ws.size(); ++k)
      if (!repacked[k]) MLA_RETURN_IF_ERROR(populate_weight(*ws[k].w, ws[k].what));
    MLA_RETURN_IF_ERROR(populate_weight(m.embed, dir + ": embed_tokens"));
  }
  m.repack_stats.huge_page_bytes = m.repacked.huge_page_bytes();
  m.repack_stats.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return Status();
}

}  // namespace mla
