// read_decode_inputs / write_decode_outputs for `mla attention`.
#include "attention_io.h"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>

#include "core/kv_format.h"
#include "io/safetensors.h"

namespace mla::cli {
namespace {

Result<const TensorInfo*> need(const SafetensorsFile& f, const char* name, int rank,
                               const char* dims) {
  const TensorInfo* t = f.find(name);
  if (!t)
    return invalid_argument(fmt::format("{}: missing tensor \"{}\" {}", f.path(), name, dims));
  if (int(t->shape.size()) != rank)
    return invalid_argument(fmt::format("{}: tensor \"{}\" has rank {}, expected {} {}", f.path(),
                                        name, t->shape.size(), rank, dims));
  for (size_t i = 0; i < t->shape.size(); ++i)
    if (t->shape[i] > (1 << 30))
      return invalid_argument(fmt::format("{}: tensor \"{}\" shape[{}] = {} is too large", f.path(),
                                          name, i, t->shape[i]));
  return t;
}

Status check_dim(const SafetensorsFile& f, const TensorInfo& t, int axis, int64_t want,
                 const char* what) {
  if (t.shape[axis] != want)
    return invalid_argument(fmt::format("{}: tensor \"{}\" shape[{}] = {} but {} is {}", f.path(),
                                        t.name, axis, t.shape[axis], what, want));
  return {};
}

template <typename T>
Result<AlignedBuffer<T>> copy_out(const TensorInfo& t) {
  MLA_ASSIGN_OR_RETURN(auto buf, AlignedBuffer<T>::allocate(t.byte_size / sizeof(T) + 1, t.name));
  if (t.byte_size) std::memcpy(buf.data(), t.data, t.byte_size);
  return buf;
}

Result<double> meta_number(const SafetensorsFile& f, const char* key, double fallback) {
  auto it = f.metadata().find(key);
  if (it == f.metadata().end()) return fallback;
  const std::string& text = it->second;
  // Plain decimal only: strtod would also take leading spaces, hex and "inf".
  const bool plain =
      !text.empty() && text.find_first_not_of("0123456789+-.eE") == std::string::npos;
  char* end = nullptr;
  errno = 0;
  const double v = plain ? std::strtod(text.c_str(), &end) : 0.0;
  // Finite as a float too: the kernels take these as float.
  if (!plain || *end != '\0' || errno == ERANGE || !std::isfinite(float(v)))
    return invalid_argument(fmt::format(
        "{}: metadata \"{}\" = \"{}\" is not a finite decimal number", f.path(), key, text));
  return v;
}

}  // namespace

Result<DecodeInputs> read_decode_inputs(const std::string& path) {
  MLA_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::open(path));
  MLA_ASSIGN_OR_RETURN(const TensorInfo* q, need(f, "q", 4, "[b, s_q, h_q, d_qk]"));
  MLA_ASSIGN_OR_RETURN(const TensorInfo* kv,
                       need(f, "kv_cache", 3, "[num_blocks, page_size, d_qk]"));
  MLA_ASSIGN_OR_RETURN(const TensorInfo* bt, need(f, "block_table", 2, "[b, max_blocks]"));
  MLA_ASSIGN_OR_RETURN(const TensorInfo* sl, need(f, "cache_seqlens", 1, "[b]"));
  if (q->dtype != DType::kBF16 && q->dtype != DType::kF32)
    return invalid_argument(
        fmt::format("{}: tensor \"q\" dtype {} (need BF16 or F32)", path, dtype_name(q->dtype)));
  // A quantised cache is U8 records named by metadata kv_dtype; a plain one is BF16 or F32 rows.
  std::optional<KvCacheDtype> kv_format;
  if (auto it = f.metadata().find("kv_dtype");
      it != f.metadata().end() && it->second != "bf16" && it->second != "f32") {
    auto k = parse_kv_cache_dtype(it->second);
    if (!k.ok())
      return invalid_argument(fmt::format("{}: metadata kv_dtype: {}", path, k.status().message()));
    kv_format = *k;
    if (kv->dtype != DType::kU8)
      return invalid_argument(
          fmt::format("{}: tensor \"kv_cache\" dtype {} but kv_dtype {} records are U8", path,
                      dtype_name(kv->dtype), it->second));
  } else if (kv->dtype != DType::kBF16 && kv->dtype != DType::kF32) {
    return invalid_argument(fmt::format(
        "{}: tensor \"kv_cache\" dtype {} (need BF16 or F32, or U8 with metadata kv_dtype)", path,
        dtype_name(kv->dtype)));
  }
  for (const TensorInfo* t : {bt, sl})
    if (t->dtype != DType::kI32)
      return invalid_argument(fmt::format("{}: tensor \"{}\" dtype {} (need I32)", path, t->name,
                                          dtype_name(t->dtype)));
  const int64_t b = q->shape[0], d_qk = q->shape[3];
  MLA_RETURN_IF_ERROR(check_dim(f, *bt, 0, b, "q's batch (shape[0])"));
  MLA_RETURN_IF_ERROR(check_dim(f, *sl, 0, b, "q's batch (shape[0])"));

  MLA_ASSIGN_OR_RETURN(
      double scale,
      meta_number(f, "softmax_scale", 1.0 / std::sqrt(double(std::max<int64_t>(d_qk, 1)))));
  MLA_ASSIGN_OR_RETURN(double d_v, meta_number(f, "d_v", 512.0));
  if (f.metadata().count("head_dim_v")) {
    MLA_ASSIGN_OR_RETURN(d_v, meta_number(f, "head_dim_v", 512.0));
  }
  if (d_v != std::floor(d_v) || d_v < 1 || d_v > double(d_qk))
    return invalid_argument(
        fmt::format("{}: metadata d_v = {} must be an integer in [1, d_qk = {}]", path, d_v, d_qk));
  if (kv_format) {
    const int64_t rec = kv_bytes_per_token(*kv_format, int(d_v), int(d_qk - d_v));
    if (kv->shape[2] != rec)
      return invalid_argument(
          fmt::format("{}: tensor \"kv_cache\" shape[2] = {} but a {} record of r = d_v = {}, d_r "
                      "= {} is {} bytes",
                      path, kv->shape[2], kv_cache_dtype_name(*kv_format), d_v, d_qk - d_v, rec));
  } else {
    MLA_RETURN_IF_ERROR(check_dim(f, *kv, 2, d_qk, "q's d_qk (shape[3])"));
  }
  MLA_ASSIGN_OR_RETURN(double global_scale,
                       meta_number(f, "kv_global_scale", kNvfp4DefaultGlobalScale));
  bool causal = false;
  if (auto it = f.metadata().find("causal"); it != f.metadata().end()) {
    const std::string& v = it->second;
    if (v == "true" || v == "True" || v == "1")
      causal = true;
    else if (v == "false" || v == "False" || v == "0")
      causal = false;
    else
      return invalid_argument(
          fmt::format("{}: metadata \"causal\" = \"{}\" (need true or false)", path, v));
  }

  DecodeInputs in;
  MLA_ASSIGN_OR_RETURN(in.q, copy_out<uint8_t>(*q));
  MLA_ASSIGN_OR_RETURN(in.kv_cache, copy_out<uint8_t>(*kv));
  MLA_ASSIGN_OR_RETURN(in.block_table, copy_out<int32_t>(*bt));
  MLA_ASSIGN_OR_RETURN(in.cache_seqlens, copy_out<int32_t>(*sl));
  MlaDecodeParams& p = in.params;
  p.b = int(b);
  p.s_q = int(q->shape[1]);
  p.h_q = int(q->shape[2]);
  p.d_qk = int(d_qk);
  p.d_v = int(d_v);
  p.q_dtype = q->dtype;
  p.q = in.q.data();
  p.cache = {.dtype = kv_format ? kv_cache_latent_dtype(*kv_format) : kv->dtype,
             .global_scale = float(global_scale),
             .rows = in.kv_cache.data(),
             .page_size = int(kv->shape[1]),
             .num_blocks = int(kv->shape[0]),
             .block_table = in.block_table.data(),
             .max_blocks_per_seq = int(bt->shape[1]),
             .seq_lens = in.cache_seqlens.data()};
  p.softmax_scale = float(scale);
  p.causal = causal;
  if (!(p.softmax_scale > 0.0f))
    return invalid_argument(
        fmt::format("{}: metadata softmax_scale = {} must be positive", path, scale));
  // Outputs are the caller's: validate the inputs with stand-ins for them.
  MlaDecodeParams check = p;
  float stand_in = 0.0f;
  check.out = check.lse = &stand_in;
  if (Status s = validate(check); !s.ok())
    return invalid_argument(fmt::format("{}: {}", path, s.message()));
  return in;
}

Status write_decode_outputs(const std::string& path, const MlaDecodeParams& p,
                            const std::string& variant, const std::string& intermediates) {
  const int64_t n_out = int64_t(p.b) * p.s_q * p.h_q * p.d_v, n_lse = int64_t(p.b) * p.h_q * p.s_q;
  std::vector<TensorToWrite> t = {
      {"out", DType::kF32, {p.b, p.s_q, p.h_q, p.d_v}, p.out, size_t(n_out) * 4},
      {"lse", DType::kF32, {p.b, p.h_q, p.s_q}, p.lse, size_t(n_lse) * 4},
  };
  if (p.abs_out)
    t.push_back({"abs_out", DType::kF32, {p.b, p.s_q, p.h_q, p.d_v}, p.abs_out, size_t(n_out) * 4});
  return write_safetensors(
      path, t, {{"variant", variant}, {"intermediates", intermediates}, {"lse_base", "e"}});
}

}  // namespace mla::cli
