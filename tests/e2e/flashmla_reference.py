#!/usr/bin/env python3
# numpy model of FlashMLA's reference decode: goldens, checker and live runner for `mla attention`.
#
# Usage:
#   flashmla_reference.py generate OUTDIR [--precision fp32|fp64]
#   flashmla_reference.py check IN EXPECTED ACTUAL
#   flashmla_reference.py live BINARY
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


def reference_decode(q, kv_cache, block_table, cache_seqlens, softmax_scale, causal, d_v, precision):
    """q [b, s_q, h_q, d_qk], kv_cache [num_blocks, page_size, d_qk] (float32 values, BF16 inputs
    already widened). precision "fp32" mirrors FlashMLA's test (FP32 matmul, softmax, logsumexp on
    BF16-valued inputs); "fp64" is the exact-arithmetic oracle. Returns out [b, s_q, h_q, d_v] and
    lse [b, h_q, s_q] (natural log; +inf and zero output for a row that sees no key)."""
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


def make_inputs(case, seed):
    name, b, s_q, h_q, seqlens, causal, page_size, d_qk, d_v, q_dt, kv_dt = case
    rng = np.random.default_rng(seed)
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
    q = rng.standard_normal((b, s_q, h_q, d_qk), dtype=np.float32)
    kv = rng.standard_normal((num_blocks, page_size, d_qk), dtype=np.float32)
    if q_dt == "BF16":
        q = round_to_bf16(q)
    if kv_dt == "BF16":
        kv = round_to_bf16(kv)
    kv[~used] = np.nan  # a kernel that reads past cache_seqlens poisons its output
    scale = float(np.float32(d_qk**-0.5))  # FlashMLA's default; exact in the FP32 the CLI keeps
    meta = {"softmax_scale": repr(scale), "causal": "true" if causal else "false", "d_v": str(d_v), "case": name}
    tensors = [
        ("q", q_dt, q),
        ("kv_cache", kv_dt, kv),
        ("block_table", "I32", block_table),
        ("cache_seqlens", "I32", np.asarray(seqlens, dtype=np.int32)),
    ]
    return tensors, meta


def reference_from_file(path, precision):
    t, meta = read_safetensors(path)
    return reference_decode(t["q"], t["kv_cache"], t["block_table"], t["cache_seqlens"],
                            float(meta["softmax_scale"]), meta["causal"] == "true", int(meta.get("d_v", 512)),
                            precision)


def generate(outdir, precision="fp32"):
    os.makedirs(outdir, exist_ok=True)
    names = []
    for k, case in enumerate(CASES):
        name = case[0]
        tensors, meta = make_inputs(case, seed=1000 + k)
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


# ---------------------------------------------------------------------------------------------
# The pass rule of spec/mla.md §5 (FlashMLA's, for BF16 outputs): per element |Δ| ≤ 8e-4 or
# |Δ|/|ref| ≤ 2.01/128 (two BF16 ulps), cosine over the finite elements ≥ 1 − 5e-6, LSE within
# 1e-6 or 8.01/65536 relative, and inf/NaN in exactly the same places.

OUT_ATOL, OUT_RTOL, OUT_COS_MIN = 8e-4, 2.01 / 128, 1.0 - 5e-6
LSE_ATOL, LSE_RTOL = 1e-6, 8.01 / 65536


def _compare_tensor(label, ref, got, atol, rtol, cos_min, axes):
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
    bad = both & ~((err <= atol) | (err <= rtol * np.abs(ref)))
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


def compare_outputs(ref_out, ref_lse, got_out, got_lse):
    problems = []
    for label, ref, got in (("out", ref_out, got_out), ("lse", ref_lse, got_lse)):
        if ref.shape != got.shape:
            problems.append(f"{label}: shape {list(got.shape)}, expected {list(ref.shape)}")
    if problems:
        return problems
    problems += _compare_tensor("out", ref_out, got_out, OUT_ATOL, OUT_RTOL, OUT_COS_MIN, ("b", "s_q", "h_q", "d_v"))
    problems += _compare_tensor("lse", ref_lse, got_lse, LSE_ATOL, LSE_RTOL, None, ("b", "h_q", "s_q"))
    return problems


def check(in_path, expected_path, actual_path):
    """Returns a list of problems (empty on pass)."""
    inputs, meta = read_safetensors(in_path)
    expected, _ = read_safetensors(expected_path)
    try:
        actual, _ = read_safetensors(actual_path)
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
    return compare_outputs(expected["out"], expected["lse"], actual["out"], actual["lse"])


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
            for args in runs:
                label = f"{name} {' '.join(args)}"
                actual = os.path.join(tmp, name + ".actual.safetensors")
                if os.path.exists(actual):
                    os.remove(actual)
                r = subprocess.run([binary, "attention", "--in", in_path, "--out", actual] + args,
                                   capture_output=True, text=True)
                if r.returncode != 0:
                    if "does not support" in r.stderr + r.stdout:
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
            return 1
        print(f"PASS {args[2]}")
        return 0
    if cmd == "live" and len(args) == 1:
        return live(args[0])
    print(usage, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
