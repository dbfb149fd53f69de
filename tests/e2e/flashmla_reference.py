#!/usr/bin/env python3
# numpy model of FlashMLA's reference decode: goldens, checker and live runner for `mla attention`.
#
# Usage:
#   flashmla_reference.py generate OUTDIR [--precision fp32|fp64]
#   flashmla_reference.py check IN EXPECTED ACTUAL
#   flashmla_reference.py live BINARY
# Quantised caches (fp8_e4m3, int8, nvfp4; kv_records.py writes and reads the records): the inputs
# hold U8 records, the expected outputs are the reference run on the values those records represent
# (so the same pass rule applies), and `check` also reports, as information, what the format costs:
# the records against the FP32 values they were made from, and the attention on them against the
# attention on the BF16-rounded cache.
# Goldens in tests/data/attention were made with numpy==2.2.6 (pip install numpy==2.2.6) on
# Python 3.11; other numpy versions may change the last bits of the FP32 reference (BLAS summation
# order), which the pass rule absorbs, but not the inputs (Generator/PCG64 streams are stable).
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:  # the CTest entry must not fail on a machine without numpy
    np = None
else:
    import kv_records  # beside this file (needs numpy)

# ---------------------------------------------------------------------------------------------
# safetensors: u64 little-endian header length N, N bytes of JSON, then the data section.

_NP_DTYPES = {"F32": "<f4", "F64": "<f8", "I32": "<i4", "I64": "<i8", "U16": "<u2", "U8": "u1"}


def bf16_bits_to_f32(bits):
    # BF16 is the upper half of an IEEE float32, so widening is exact.
    return (bits.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16_bits(x):
    # Round to nearest even, as PyTorch's .to(torch.bfloat16) does; NaN becomes the quiet NaN 0x7FC0
    # so that rounding cannot carry a NaN payload into infinity.
    x = np.ascontiguousarray(x, dtype=np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FC0), rounded)


def round_to_bf16(x):
    return bf16_bits_to_f32(f32_to_bf16_bits(x))


def read_safetensors(path):
    """Returns ({name: float32/int array}, metadata); BF16 tensors come back widened to float32."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ValueError(f"{path}: not a safetensors file ({len(blob)} bytes)")
    (n,) = struct.unpack("<Q", blob[:8])
    if n > len(blob) - 8:
        raise ValueError(f"{path}: header length {n} runs past the end of the file")
    header = json.loads(blob[8 : 8 + n].decode("utf-8"))
    data = memoryview(blob)[8 + n :]
    meta = header.pop("__metadata__", {}) or {}
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        dt, shape = info["dtype"], tuple(info["shape"])
        raw = bytes(data[begin:end])
        if dt == "BF16":
            arr = bf16_bits_to_f32(np.frombuffer(raw, dtype="<u2")).reshape(shape)
        elif dt in _NP_DTYPES:
            arr = np.frombuffer(raw, dtype=_NP_DTYPES[dt]).reshape(shape).copy()
        else:
            raise ValueError(f"{path}: tensor {name!r} has dtype {dt}, which this reader does not handle")
        tensors[name] = arr
    return tensors, meta


def write_safetensors(path, tensors, metadata):
    """tensors: list of (name, dtype string, array); BF16 arrays are float32 values rounded here."""
    header, chunks, offset = {}, [], 0
    for name, dt, arr in tensors:
        if dt == "BF16":
            raw = f32_to_bf16_bits(arr).astype("<u2").tobytes()
        else:
            raw = np.ascontiguousarray(arr, dtype=_NP_DTYPES[dt]).tobytes()
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # keeps the data section 8-byte aligned, as most writers do
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for c in chunks:
            f.write(c)


# ---------------------------------------------------------------------------------------------
# The reference: for each sequence, gather its s_kv cache rows through the block table (only the
# pages it uses, so garbage entries and NaN slots are never touched), score every (query, head)
# against them, mask causally (bottom-right aligned), softmax, and average the first d_v columns.


def reference_decode(q, kv_cache, block_table, cache_seqlens, softmax_scale, causal, d_v, precision,
                     abs_values=False):
    """q [b, s_q, h_q, d_qk], kv_cache [num_blocks, page_size, d_qk] (float32 values, BF16 inputs
    already widened). precision "fp32" mirrors FlashMLA's test (FP32 matmul, softmax, logsumexp on
    BF16-valued inputs); "fp64" is the exact-arithmetic oracle. Returns out [b, s_q, h_q, d_v] and
    lse [b, h_q, s_q] (natural log; +inf and zero output for a row that sees no key). abs_values:
    out is the softmax times |V| instead, the magnitude that bounds rounding the probabilities."""
    dt = np.float32 if precision == "fp32" else np.float64
    b, s_q, h_q, d_qk = q.shape
    page_size = kv_cache.shape[1]
    out = np.zeros((b, s_q, h_q, d_v), dtype=dt)
    lse = np.full((b, h_q, s_q), np.inf, dtype=dt)
    scale = dt(softmax_scale)
    for i in range(b):
        s_kv = int(cache_seqlens[i])
        if s_kv == 0:
            continue
        pages = block_table[i, : (s_kv + page_size - 1) // page_size]
        keys = kv_cache[pages].reshape(-1, d_qk)[:s_kv].astype(dt)  # [s_kv, d_qk]
        values = keys[:, :d_v]  # V is the latent part of the same row
        if abs_values:
            values = np.abs(values)
        scores = (q[i].astype(dt).reshape(s_q * h_q, d_qk) @ keys.T) * scale
        scores = scores.reshape(s_q, h_q, s_kv)
        if causal:
            last_visible = s_kv - s_q + np.arange(s_q)  # query r sees keys 0 .. last_visible[r]
            visible = np.arange(s_kv)[None, :] <= last_visible[:, None]  # [s_q, s_kv]
            scores = np.where(visible[:, None, :], scores, dt(-np.inf))
        row_max = scores.max(axis=-1)  # [s_q, h_q]; -inf for a row with no visible key
        empty = np.isneginf(row_max)
        shift = np.where(empty, dt(0), row_max)
        p = np.exp(scores - shift[..., None])  # exp(-inf) = 0 for masked keys
        denom = p.sum(axis=-1)
        with np.errstate(divide="ignore", invalid="ignore"):
            o = (p.reshape(-1, s_kv) @ values).reshape(s_q, h_q, d_v) / denom[..., None]
            row_lse = row_max + np.log(denom)
        o[empty] = 0
        row_lse[empty] = np.inf
        out[i] = o
        lse[i] = row_lse.T
    return out.astype(np.float32), lse.astype(np.float32)


# ---------------------------------------------------------------------------------------------
# The golden grid. Between them the cases cover b {1,2,3}, s_q {1,2,4}, s_kv {0,20,140,300}
# (0 only inside a batch), h_q {1,3,16}, causal and not, pages of 16 and 64, varlen batches, and a
# causal case with s_kv < s_q (rows that see no key). Every case permutes its pages, fills unused
# block-table entries with garbage and unused cache slots (tails and a spare page) with NaN.

GARBAGE_ENTRIES = [-1, 2**31 - 1, -(2**31), 1_000_000_007]

CASES = [
    # name, b, s_q, h_q, cache_seqlens, causal, page_size, d_qk, d_v, q dtype, kv dtype
    ("b1_sq1_h1_s20_p16", 1, 1, 1, [20], False, 16, 576, 512, "BF16", "BF16"),
    ("b1_sq2_h16_s300_causal_p64", 1, 2, 16, [300], True, 64, 576, 512, "BF16", "BF16"),
    ("b2_sq1_h16_s140_0_p16", 2, 1, 16, [140, 0], False, 16, 576, 512, "BF16", "BF16"),
    ("b3_sq4_h3_s20_140_300_causal_p16", 3, 4, 3, [20, 140, 300], True, 16, 576, 512, "BF16", "BF16"),
    ("b3_sq2_h3_s0_20_140_p64", 3, 2, 3, [0, 20, 140], False, 64, 576, 512, "BF16", "BF16"),
    ("b2_sq4_h1_s140_20_causal_p16", 2, 4, 1, [140, 20], True, 16, 576, 512, "BF16", "BF16"),
    ("b2_sq1_h3_s0_20_causal_p16", 2, 1, 3, [0, 20], True, 16, 576, 512, "BF16", "BF16"),
    # one key past a page boundary
    ("b1_sq4_h3_s65_p64", 1, 4, 3, [65], False, 64, 576, 512, "BF16", "BF16"),
    # causal with s_kv < s_q: the first rows of sequence 0 see no key (out 0, lse +inf)
    ("b2_sq4_h3_s2_17_causal_p16", 2, 4, 3, [2, 17], True, 16, 576, 512, "BF16", "BF16"),
    ("f32_b2_sq2_h3_s20_140_causal_p16", 2, 2, 3, [20, 140], True, 16, 80, 64, "F32", "F32"),
    ("f32_b3_sq4_h16_s300_0_33_p64", 3, 4, 16, [300, 0, 33], False, 64, 80, 64, "F32", "F32"),
    # an FP32 query over a BF16 cache: the BF16-dot variant must decline it rather than round q
    ("f32q_bf16kv_b1_sq1_h3_s140_p16", 1, 1, 3, [140], False, 16, 80, 64, "F32", "BF16"),
]


# Quantised caches (kv_records.py): the same FlashMLA-style layout, but the cache holds U8 records
# (metadata kv_dtype, and kv_global_scale for nvfp4 where given; absent means 1/6) and unused slots
# are 0xFF bytes, which read as NaN scales and codes in every format. The latent is drawn with
# varied magnitudes per 16 values (so scale blocks differ, some are all zero, some tiny enough for
# subnormal e4m3 codes and scales) and a few outliers. The r136 cases have d_v 136 = 128 + 8 and
# d_qk 200, so the last scale block is partial and the nvfp4 rope section needs its 2-byte
# alignment (scales end at byte 77).
QUANT_CASES = [
    # name, b, s_q, h_q, cache_seqlens, causal, page_size, d_qk, d_v, kv_dtype, kv_global_scale
    ("fp8_b2_sq4_h3_s20_140_causal_p16", 2, 4, 3, [20, 140], True, 16, 576, 512, "fp8_e4m3", None),
    ("fp8_b2_sq1_h16_s65_0_p64", 2, 1, 16, [65, 0], False, 64, 576, 512, "fp8_e4m3", None),
    ("int8_b3_sq2_h3_s0_20_33_p64", 3, 2, 3, [0, 20, 33], False, 64, 576, 512, "int8", None),
    ("int8_b1_sq2_h16_s140_causal_p16", 1, 2, 16, [140], True, 16, 576, 512, "int8", None),
    ("nvfp4_b2_sq1_h16_s140_20_p64", 2, 1, 16, [140, 20], False, 64, 576, 512, "nvfp4", None),
    ("nvfp4_g005_b3_sq2_h3_s0_20_140_causal_p16", 3, 2, 3, [0, 20, 140], True, 16, 576, 512, "nvfp4", "0.05"),
    ("fp8_r136_b2_sq2_h3_s20_140_causal_p16", 2, 2, 3, [20, 140], True, 16, 200, 136, "fp8_e4m3", None),
    ("int8_r136_b1_sq1_h16_s65_p64", 1, 1, 16, [65], False, 64, 200, 136, "int8", None),
    # causal with s_kv 3 < s_q 4: the first row of sequence 0 sees no key
    ("nvfp4_r136_b3_sq4_h3_s3_0_33_causal_p16", 3, 4, 3, [3, 0, 33], True, 16, 200, 136, "nvfp4", "0.3"),
]
QUANT_SEED_BASE = 2000

# Magnitudes of the latent per group of 16 values (one nvfp4 block, an eighth of an fp8 block).
_GROUP_FACTORS = [1.0] * 8 + [0.25, 4.0, 1e-4, 0.0]


def _paged_layout(rng, seqlens, page_size):
    """Permuted pages, garbage in unused block-table columns; returns (block_table, used, num_blocks)."""
    b = len(seqlens)
    pages_needed = [(s + page_size - 1) // page_size for s in seqlens]
    max_blocks = max(pages_needed) + 1  # at least one unused column per row, for garbage
    num_blocks = sum(pages_needed) + 1  # one spare page nobody references
    order = rng.permutation(num_blocks)  # pages of a sequence are scattered over the pool
    block_table = np.empty((b, max_blocks), dtype=np.int32)
    used = np.zeros((num_blocks, page_size), dtype=bool)
    next_page = 0
    for i, s in enumerate(seqlens):
        n = pages_needed[i]
        block_table[i, :n] = order[next_page : next_page + n]
        next_page += n
        block_table[i, n:] = rng.choice(GARBAGE_ENTRIES, size=max_blocks - n)
        for t in range(s):
            used[block_table[i, t // page_size], t % page_size] = True
    return block_table, used, num_blocks


def _base_meta(name, d_qk, d_v, causal):
    scale = float(np.float32(d_qk**-0.5))  # FlashMLA's default; exact in the FP32 the CLI keeps
    return {"softmax_scale": repr(scale), "causal": "true" if causal else "false", "d_v": str(d_v), "case": name}


def make_inputs(case, seed):
    name, b, s_q, h_q, seqlens, causal, page_size, d_qk, d_v, q_dt, kv_dt = case
    rng = np.random.default_rng(seed)
    block_table, used, num_blocks = _paged_layout(rng, seqlens, page_size)
    q = rng.standard_normal((b, s_q, h_q, d_qk), dtype=np.float32)
    kv = rng.standard_normal((num_blocks, page_size, d_qk), dtype=np.float32)
    if q_dt == "BF16":
        q = round_to_bf16(q)
    if kv_dt == "BF16":
        kv = round_to_bf16(kv)
    kv[~used] = np.nan  # a kernel that reads past cache_seqlens poisons its output
    meta = _base_meta(name, d_qk, d_v, causal)
    tensors = [
        ("q", q_dt, q),
        ("kv_cache", kv_dt, kv),
        ("block_table", "I32", block_table),
        ("cache_seqlens", "I32", np.asarray(seqlens, dtype=np.int32)),
    ]
    return tensors, meta


def global_scale_of(meta):
    """The FP32 nvfp4 global scale the CLI uses: metadata kv_global_scale (a decimal string, read as
    a double and narrowed to FP32) or kNvfp4DefaultGlobalScale."""
    if "kv_global_scale" in meta:
        return np.float32(float(meta["kv_global_scale"]))
    return kv_records.NVFP4_DEFAULT_GLOBAL_SCALE


def make_quant_inputs(case, seed):
    """Returns (tensors, meta, source, used): source is the FP32 cache [num_blocks, page_size, d_qk]
    the records were made from (NaN in unused slots), used marks the slots that hold tokens."""
    name, b, s_q, h_q, seqlens, causal, page_size, d_qk, d_v, fmt, g_text = case
    d_r = d_qk - d_v
    rng = np.random.default_rng(seed)
    block_table, used, num_blocks = _paged_layout(rng, seqlens, page_size)
    q = round_to_bf16(rng.standard_normal((b, s_q, h_q, d_qk), dtype=np.float32))
    src = rng.standard_normal((num_blocks, page_size, d_qk), dtype=np.float32)
    groups = -(-d_v // 16)
    factor = rng.choice(np.array(_GROUP_FACTORS, dtype=np.float32), size=(num_blocks, page_size, groups))
    src[..., :d_v] *= np.repeat(factor, 16, axis=-1)[..., :d_v]
    src[..., :d_v][rng.random((num_blocks, page_size)) < 0.03] = 0.0  # whole latent zero
    outlier = rng.random((num_blocks, page_size)) < 0.05
    where = rng.integers(0, d_v, size=(num_blocks, page_size))
    src[outlier, where[outlier]] *= np.float32(16.0)
    meta = _base_meta(name, d_qk, d_v, causal)
    meta["kv_dtype"] = fmt
    if g_text is not None:
        meta["kv_global_scale"] = g_text
    meta["seed"] = str(seed)
    g = global_scale_of(meta)
    rec_bytes = kv_records.record_layout(fmt, d_v, d_r)["record_bytes"]
    records = kv_records.quantise_rows(fmt, d_v, d_r, src.reshape(-1, d_qk), g).reshape(num_blocks, page_size, rec_bytes)
    records[~used] = 0xFF  # NaN scales and codes: a kernel that reads past cache_seqlens poisons its output
    src[~used] = np.nan
    tensors = [
        ("q", "BF16", q),
        ("kv_cache", "U8", records),
        ("block_table", "I32", block_table),
        ("cache_seqlens", "I32", np.asarray(seqlens, dtype=np.int32)),
    ]
    return tensors, meta, src, used


def cache_values(tensors, meta):
    """The cache as float values [num_blocks, page_size, d_qk]: BF16/F32 rows as read, quantised
    records dequantised (d_v = r latent values, d_r = d_qk - d_v rope values per record)."""
    kv = tensors["kv_cache"]
    fmt = meta.get("kv_dtype", "bf16")
    if fmt in ("bf16", "f32"):
        return kv
    d_qk = tensors["q"].shape[3]
    d_v = int(meta.get("d_v", 512))
    num_blocks, page_size, rec = kv.shape
    rows = kv_records.dequantise_records(fmt, d_v, d_qk - d_v, kv.reshape(-1, rec), global_scale_of(meta))
    return rows.reshape(num_blocks, page_size, d_qk)


def reference_from_file(path, precision, abs_values=False):
    t, meta = read_safetensors(path)
    return reference_decode(t["q"], cache_values(t, meta), t["block_table"], t["cache_seqlens"],
                            float(meta["softmax_scale"]), meta["causal"] == "true", int(meta.get("d_v", 512)),
                            precision, abs_values)


def all_cases():
    """(name, seed, maker) for every golden: the plain grid then the quantised one."""
    plain = [(c[0], 1000 + k, lambda c=c, s=1000 + k: make_inputs(c, s)) for k, c in enumerate(CASES)]
    quant = [(c[0], QUANT_SEED_BASE + k, lambda c=c, s=QUANT_SEED_BASE + k: make_quant_inputs(c, s)[:2])
             for k, c in enumerate(QUANT_CASES)]
    return plain + quant


def generate(outdir, precision="fp32"):
    kv_records.self_test()
    os.makedirs(outdir, exist_ok=True)
    names = []
    for name, _, maker in all_cases():
        tensors, meta = maker()
        in_path = os.path.join(outdir, f"{name}.safetensors")
        write_safetensors(in_path, tensors, meta)
        # Read back, so the expected output is computed from exactly the stored bits.
        out, lse = reference_from_file(in_path, precision)
        # The FP32 model must itself pass the rule against the FP64 one, or the goldens would
        # carry the reference's own error into every check.
        out64, lse64 = reference_from_file(in_path, "fp64")
        problems = compare_outputs(out64, lse64, out, lse)
        if problems:
            raise SystemExit(f"{name}: {precision} reference disagrees with fp64: " + "; ".join(problems))
        write_safetensors(os.path.join(outdir, f"{name}.expected.safetensors"),
                          [("out", "F32", out), ("lse", "F32", lse)],
                          {"precision": precision, "case": name, "lse_base": "e"})
        names.append(name)
    return names


def quant_report(in_path):
    """Information (not pass/fail) about a quantised golden: whether this quantiser reproduces its
    records byte for byte, the records' error against the FP32 values they were made from, and the
    cost of the format on the attention (reference on the dequantised cache vs on the BF16 cache).
    Empty for a plain cache or a case this script does not know."""
    t, meta = read_safetensors(in_path)
    fmt = meta.get("kv_dtype", "bf16")
    if fmt not in kv_records.FORMATS:
        return []
    cases = {c[0]: (k, c) for k, c in enumerate(QUANT_CASES)}
    if meta.get("case") not in cases:
        return [f"info: {fmt} cache of an unknown case {meta.get('case')!r}: no source to compare with"]
    k, case = cases[meta["case"]]
    tensors, _, src, used = make_quant_inputs(case, int(meta.get("seed", QUANT_SEED_BASE + k)))
    lines = []
    same = np.array_equal(dict((n, a) for n, _, a in tensors)["kv_cache"], t["kv_cache"])
    lines.append(f"info: {meta['case']}: {fmt} records {'reproduce' if same else 'DO NOT reproduce'} "
                 f"byte for byte from the case's seed")
    d_v = int(meta.get("d_v", 512))
    deq = cache_values(t, meta)
    x, y = src[used].astype(np.float64), deq[used].astype(np.float64)  # [tokens, d_qk]
    lat_err = np.abs(x[:, :d_v] - y[:, :d_v])
    amax = kv_records.block_amax(fmt, d_v, src[used]).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel_block = np.where(amax > 0, lat_err / amax, 0.0)
        rope_rel = np.where(x[:, d_v:] != 0, np.abs(x[:, d_v:] - y[:, d_v:]) / np.abs(x[:, d_v:]), 0.0)
    # Blocks with a tiny amax (the 1e-4 groups) sit at the bottom of the e4m3 block-scale range
    # in nvfp4, where the error relative to the block can reach 100%: reported apart.
    tiny = amax < 1e-2
    worst = lambda a: f"{a.max():.4g}" if a.size else "-"
    lines.append(f"info: latent vs FP32 source over {x.shape[0]} tokens: max |err| {lat_err.max():.4g}, "
                 f"|err|/block amax max {worst(rel_block[~tiny])} mean {rel_block[~tiny].mean():.3g} "
                 f"(blocks with amax < 1e-2: max {worst(rel_block[tiny & (amax > 0)])}); "
                 f"rope (BF16) max rel err {worst(rope_rel)}")
    args = (t["block_table"], t["cache_seqlens"], float(meta["softmax_scale"]), meta["causal"] == "true", d_v, "fp64")
    out_q, lse_q = reference_decode(t["q"], deq, *args)
    out_b, lse_b = reference_decode(t["q"], round_to_bf16(np.nan_to_num(src)), *args)
    fin = np.isfinite(lse_b)
    a, bb = out_b.astype(np.float64).ravel(), out_q.astype(np.float64).ravel()
    cos = float(a @ bb) / math.sqrt(float(a @ a) * float(bb @ bb)) if float(a @ a) and float(bb @ bb) else 1.0
    lines.append(f"info: attention on the {fmt} cache vs on the BF16 cache (fp64 reference): out max |diff| "
                 f"{np.abs(a - bb).max():.4g} (max |out| {np.abs(a).max():.3g}), cosine {cos:.7f}, "
                 f"lse max |diff| {np.abs(lse_b[fin] - lse_q[fin]).max() if fin.any() else 0.0:.4g}")
    return lines


# ---------------------------------------------------------------------------------------------
# The pass rule of docs/kernels/mla_decode.md §Pass rules (FlashMLA's, for BF16 outputs): per
# element |Δ| ≤ 8e-4 or |Δ|/|ref| ≤ 2.01/128 (two BF16 ulps), cosine over the finite elements
# ≥ 1 − 5e-6, LSE within 1e-6 or 8.01/65536 relative, and inf/NaN in exactly the same places.

OUT_ATOL, OUT_RTOL, OUT_COS_MIN = 8e-4, 2.01 / 128, 1.0 - 5e-6
LSE_ATOL, LSE_RTOL = 1e-6, 8.01 / 65536
# A variant whose output metadata says intermediates "bf16_probs" rounds each probability (times
# the V scale of a quantised cache) to BF16 once: 8 significant bits, so each term of P·V moves by
# at most 2^-8 of itself, plus the FP32 roundings around it (2^-22 with room). Per element it may
# add that unit times Σ p|v|, computed here by the reference on |V|.
BF16_PROBS_UNIT = 2.0 ** -8 + 2.0 ** -22


def _compare_tensor(label, ref, got, atol, rtol, cos_min, axes, extra=None):
    problems = []
    ref = ref.astype(np.float64)
    got = got.astype(np.float64)
    fin_ref, fin_got = np.isfinite(ref), np.isfinite(got)
    same_nonfinite = (np.isnan(ref) & np.isnan(got)) | (~fin_ref & (ref == got))
    mismatch = ~(fin_ref & fin_got) & ~same_nonfinite
    if mismatch.any():
        idx = np.unravel_index(np.argmax(mismatch), ref.shape)
        problems.append(f"{label}: {int(mismatch.sum())} inf/NaN positions differ, first at {_at(axes, idx)}: "
                        f"expected {float(ref[idx])}, got {float(got[idx])}")
    both = fin_ref & fin_got
    with np.errstate(invalid="ignore"):  # inf - inf at matching +inf positions, masked out here
        err = np.where(both, np.abs(ref - got), 0.0)
    allowed = np.maximum(atol, rtol * np.abs(ref)) + (0.0 if extra is None else extra)
    bad = both & ~(err <= allowed)
    if bad.any():
        idx = np.unravel_index(np.argmax(np.where(bad, err, -1.0)), ref.shape)
        problems.append(f"{label}: {int(bad.sum())} elements outside {atol:g} abs / {rtol:.6g} rel; worst at "
                        f"{_at(axes, idx)}: expected {ref[idx]:.8g}, got {got[idx]:.8g} (|diff| {err[idx]:.3g})")
    if cos_min is not None:
        r, g = ref[both], got[both]
        rr, gg = float(r @ r), float(g @ g)
        cos = 1.0 if rr == 0 and gg == 0 else (0.0 if rr == 0 or gg == 0 else float(r @ g) / math.sqrt(rr * gg))
        if cos < cos_min:
            problems.append(f"{label}: cosine {cos:.9f} < {cos_min:.9f}")
    return problems


def _at(axes, idx):
    return "[" + ", ".join(f"{a}={int(i)}" for a, i in zip(axes, idx)) + "]"


def compare_outputs(ref_out, ref_lse, got_out, got_lse, out_extra=None):
    problems = []
    for label, ref, got in (("out", ref_out, got_out), ("lse", ref_lse, got_lse)):
        if ref.shape != got.shape:
            problems.append(f"{label}: shape {list(got.shape)}, expected {list(ref.shape)}")
    if problems:
        return problems
    problems += _compare_tensor("out", ref_out, got_out, OUT_ATOL, OUT_RTOL, OUT_COS_MIN, ("b", "s_q", "h_q", "d_v"),
                                out_extra)
    problems += _compare_tensor("lse", ref_lse, got_lse, LSE_ATOL, LSE_RTOL, None, ("b", "h_q", "s_q"))
    return problems


def check(in_path, expected_path, actual_path):
    """Returns a list of problems (empty on pass)."""
    inputs, meta = read_safetensors(in_path)
    expected, _ = read_safetensors(expected_path)
    try:
        actual, actual_meta = read_safetensors(actual_path)
    except (OSError, ValueError) as e:
        return [f"{actual_path}: {e}"]
    for name in ("out", "lse"):
        if name not in actual:
            return [f"{actual_path}: missing tensor {name!r}"]
    b, s_q, h_q, _ = inputs["q"].shape
    d_v = int(meta.get("d_v", 512))
    want = {"out": (b, s_q, h_q, d_v), "lse": (b, h_q, s_q)}
    for name, shape in want.items():
        if expected[name].shape != shape:
            return [f"{expected_path}: {name} shape {list(expected[name].shape)} does not match {in_path} {list(shape)}"]
    extra = None
    if actual_meta.get("intermediates") == "bf16_probs":
        abs_out, _ = reference_from_file(in_path, "fp64", abs_values=True)
        extra = BF16_PROBS_UNIT * abs_out.astype(np.float64)
    return compare_outputs(expected["out"], expected["lse"], actual["out"], actual["lse"], extra)


# ---------------------------------------------------------------------------------------------
# live: regenerate the grid, run the binary with every backend and variant, check each output.

# Used only when the CLI's "no variant named" message cannot be parsed for the registered list.
FALLBACK_VARIANTS = ["mla_decode.cpu.avx512bf16.bf16", "mla_decode.cpu.avx512.bf16", "mla_decode.cpu.avx2.bf16",
                     "mla_decode.cpu.scalar.bf16", "mla_decode.ref.fp64.any"]


def discover_variants(binary, in_path, out_path):
    r = subprocess.run([binary, "attention", "--in", in_path, "--out", out_path, "--variant", "no.such.variant"],
                       capture_output=True, text=True)
    text = r.stdout + r.stderr
    start = text.find("(have: ")
    if r.returncode == 0 or start < 0:
        return FALLBACK_VARIANTS
    names = text[start + len("(have: ") : text.find(")", start)].split(", ")
    return [n.strip() for n in names if n.strip().startswith("mla_decode.")] or FALLBACK_VARIANTS


def live(binary):
    if not os.path.exists(binary):
        print(f"live: {binary} does not exist")
        return 1
    passed = failed = skipped = 0
    with tempfile.TemporaryDirectory(prefix="mla_flashmla_") as tmp:
        names = generate(tmp)
        first_in = os.path.join(tmp, names[0] + ".safetensors")
        variants = discover_variants(binary, first_in, os.path.join(tmp, "discover.out.safetensors"))
        runs = [["--backend", "cpu"], ["--backend", "ref"]] + [["--variant", v] for v in variants]
        for name in names:
            in_path = os.path.join(tmp, name + ".safetensors")
            expected = os.path.join(tmp, name + ".expected.safetensors")
            for line in quant_report(in_path):
                print(line)
            for args in runs:
                label = f"{name} {' '.join(args)}"
                actual = os.path.join(tmp, name + ".actual.safetensors")
                if os.path.exists(actual):
                    os.remove(actual)
                r = subprocess.run([binary, "attention", "--in", in_path, "--out", actual] + args,
                                   capture_output=True, text=True)
                if r.returncode != 0:
                    # Only an explicitly named variant may decline (ISA missing, input it does not
                    # take); --backend must pick one that runs.
                    if args[0] == "--variant" and "does not support" in r.stderr + r.stdout:
                        skipped += 1
                        print(f"SKIP {label}: {(r.stderr or r.stdout).strip()}")
                        continue
                    failed += 1
                    print(f"FAIL {label}: exit {r.returncode}: {(r.stderr or r.stdout).strip()}")
                    continue
                problems = check(in_path, expected, actual)
                if problems:
                    failed += 1
                    print(f"FAIL {label}:\n  " + "\n  ".join(problems))
                else:
                    passed += 1
                    print(f"PASS {label}")
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed or not passed else 0


def main(argv):
    usage = ("usage: flashmla_reference.py generate OUTDIR [--precision fp32|fp64] | "
             "check IN EXPECTED ACTUAL | live BINARY")
    if len(argv) < 2:
        print(usage, file=sys.stderr)
        return 2
    if np is None:
        print("skipped: numpy not installed (pip install numpy==2.2.6)")
        return 0
    cmd, args = argv[1], argv[2:]
    if cmd == "generate" and len(args) in (1, 3):
        precision = "fp32"
        if len(args) == 3:
            if args[1] != "--precision" or args[2] not in ("fp32", "fp64"):
                print(usage, file=sys.stderr)
                return 2
            precision = args[2]
        for name in generate(args[0], precision):
            print(f"wrote {os.path.join(args[0], name)}.safetensors and .expected.safetensors")
        return 0
    if cmd == "check" and len(args) == 3:
        problems = check(*args)
        if problems:
            print(f"FAIL {args[2]} against {args[1]}:\n  " + "\n  ".join(problems))
        else:
            print(f"PASS {args[2]}")
        for line in quant_report(args[0]):
            print(line)
        return 1 if problems else 0
    if cmd == "live" and len(args) == 1:
        return live(args[0])
    print(usage, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
