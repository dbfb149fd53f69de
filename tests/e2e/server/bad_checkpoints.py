"""Checkpoint surgery for the fault tests: safetensors read and rewrite, the oversized model of
L11, and the broken checkpoints of L12 (docs/RELIABILITY.md §Checklist R1-R17), each made from a
valid `mla make-tiny` checkpoint."""
import errno
import gzip
import json
import os
import random
import re
import resource
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import zlib


def model_bytes(d):
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))


def write_safetensors(path, header, blobs, sparse=()):
    """header: {name: (dtype, shape)} in order; blobs: {name: bytes}; names in `sparse` are
    zeros written as a hole (sized by shape)."""
    sizes = {"BF16": 2, "F32": 4, "F8_E4M3": 1, "F16": 2}
    meta, off = {"__metadata__": {"format": "pt"}}, 0
    for name, (dt, shape) in header.items():
        n = sizes[dt]
        for d in shape:
            n *= d
        meta[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + n]}
        off += n
    h = json.dumps(meta, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        start = f.tell()
        for name in header:
            b, e = meta[name]["data_offsets"]
            if name in sparse:
                f.seek(start + e)
            else:
                f.write(blobs[name])
        f.truncate(start + off)


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    return n, header, data


def make_big_model(binary, tmp, size_bytes):
    """A v2-lite tiny model whose dense MLP is widened until the weights are `size_bytes` (the
    extra bytes are a sparse hole of zeros, so the disk holds a few MB)."""
    d = os.path.join(tmp, "big")
    subprocess.run([binary, "make-tiny", "--family", "v2-lite", "--out", d, "--shards", "1"],
                   check=True, capture_output=True)
    cfg = json.load(open(os.path.join(d, "config.json")))
    n, header, data = read_safetensors(os.path.join(d, "model.safetensors"))
    header.pop("__metadata__", None)
    hidden = cfg["hidden_size"]
    inter = size_bytes // (3 * hidden * 2) + 1
    cfg["intermediate_size"] = inter
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"), indent=2)
    new_header, blobs, sparse = {}, {}, set()
    for name, t in header.items():
        shape = list(t["shape"])
        if ".mlp.gate_proj." in name or ".mlp.up_proj." in name:
            if "experts" not in name and "shared" not in name:
                shape, sparse = [inter, hidden], sparse | {name}
        if ".mlp.down_proj." in name and "experts" not in name and "shared" not in name:
            shape, sparse = [hidden, inter], sparse | {name}
        new_header[name] = (t["dtype"], shape)
        b, e = t["data_offsets"]
        blobs[name] = data[b:e]
    write_safetensors(os.path.join(d, "model.safetensors"), new_header, blobs, sparse)
    return d


def st_rewrite(path, mutate_header=None, raw=None, tail=None):
    """Rewrites a safetensors file: mutate_header(header dict) edits the JSON (re-encoded, spaces
    padded to 8); raw(header_bytes, data) -> (prefix bytes for the whole file); tail(data)."""
    n, header, data = read_safetensors(path)
    with open(path, "rb") as f:
        f.seek(8)
        hbytes = f.read(n)
    if raw:
        blob = raw(hbytes, data)
    else:
        if mutate_header:
            mutate_header(header)
        h = json.dumps(header, separators=(",", ":")).encode()
        h += b" " * (-len(h) % 8)
        blob = struct.pack("<Q", len(h)) + h + (tail(data) if tail else data)
    with open(path, "wb") as f:
        f.write(blob)


def first_tensor(header, pred=lambda k: True):
    return next(k for k in header if k != "__metadata__" and pred(k))


def last_tensor(header):
    return max((k for k in header if k != "__metadata__"),
               key=lambda k: header[k]["data_offsets"][1])


def edit_config(d, fn):
    p = os.path.join(d, "config.json")
    c = json.load(open(p))
    fn(c)
    text = json.dumps(c, indent=2)
    open(p, "w").write(text)


def edit_config_text(d, fn):
    p = os.path.join(d, "config.json")
    text = fn(open(p).read())
    open(p, "w").write(text)


def rename_tensor(d, shard, old_pred, suffix="_renamed"):
    """Renames the first tensor matching old_pred in `shard` (and in the index, if any)."""
    name_holder = {}

    def mut(h):
        k = first_tensor(h, old_pred)
        name_holder["k"] = k
        h[k + suffix] = h.pop(k)
    st_rewrite(os.path.join(d, shard), mut)
    idx = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(idx):
        j = json.load(open(idx))
        k = name_holder["k"]
        j["weight_map"][k + suffix] = j["weight_map"].pop(k)
        json.dump(j, open(idx, "w"), indent=2)
    return name_holder["k"]


def edit_index(d, fn):
    p = os.path.join(d, "model.safetensors.index.json")
    j = json.load(open(p))
    fn(j)
    json.dump(j, open(p, "w"), indent=2)


def copy_embedding_into_s2(d):
    """model.embed_tokens.weight (of shard 1) also stored, validly, at the end of shard 2."""
    _, h1, data1 = read_safetensors(os.path.join(d, S1))
    e = h1["model.embed_tokens.weight"]
    blob = data1[e["data_offsets"][0]:e["data_offsets"][1]]
    _, h2, data2 = read_safetensors(os.path.join(d, S2))
    end = max(v["data_offsets"][1] for k, v in h2.items() if k != "__metadata__")
    h2["model.embed_tokens.weight"] = dict(e, data_offsets=[end, end + len(blob)])
    h = json.dumps(h2, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(os.path.join(d, S2), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data2[:end] + blob)


def alias_layernorms(h):
    ks = [k for k in h if k.endswith("input_layernorm.weight")]
    h[ks[1]]["data_offsets"] = list(h[ks[0]]["data_offsets"])


S1 = "model-00001-of-00002.safetensors"
S2 = "model-00002-of-00002.safetensors"


def shard_cases():
    """(name, family, function(dir), words one of which the error line must name)."""
    def set_len(n):
        return lambda hb, data: struct.pack("<Q", n) + hb + data

    def shape_of(k_pred, fn):
        def mut(h):
            k = first_tensor(h, k_pred)
            h[k]["shape"] = fn(h[k]["shape"])
        return mut

    def p(d):
        return os.path.join(d, S1)

    cases = [
        ("file shorter than 8 bytes", lambda d: open(p(d), "wb").write(b"\x01\x02\x03"), [S1]),
        ("header length > file size", lambda d: st_rewrite(p(d), raw=lambda hb, data: struct.pack(
            "<Q", len(hb) + len(data) + 100) + hb + data), [S1]),
        ("header length > 100 MB", lambda d: st_rewrite(p(d), raw=lambda hb, data: struct.pack(
            "<Q", 200_000_000) + hb + data), [S1]),
        ("header length 2^64-1", lambda d: st_rewrite(p(d), raw=set_len(2 ** 64 - 1)), [S1]),
        ("header not JSON", lambda d: st_rewrite(p(d), raw=lambda hb, data: struct.pack(
            "<Q", len(hb)) + b"{not json" + b" " * (len(hb) - 9) + data), [S1]),
        ("header top level array", lambda d: st_rewrite(p(d), raw=lambda hb, data: struct.pack(
            "<Q", len(hb)) + b"[" + b" " * (len(hb) - 2) + b"]" + data), [S1]),
        ("header not UTF-8", lambda d: st_rewrite(p(d), raw=lambda hb, data: struct.pack(
            "<Q", len(hb)) + hb.replace(b'"pt"', b'"\xff\xfe"', 1) + data), [S1]),
        ("header NUL padding", lambda d: st_rewrite(p(d), raw=lambda hb, data: struct.pack(
            "<Q", len(hb.rstrip(b" ")) + 8) + hb.rstrip(b" ") + b"\x00" * 8 +
            data), [S1]),
        ("duplicate tensor name", lambda d: st_rewrite(p(d), raw=lambda hb, data: (lambda h2: (
            struct.pack("<Q", len(h2)) + h2 + data))(
            (lambda t: t + b" " * (-len(t) % 8))(hb.rstrip(b" ")[:-1] + b"," + re.search(
                rb'"model\.embed_tokens\.weight":\{[^}]*\}', hb).group(0) + b"}"))), [S1]),
        ("__metadata__ non-string", lambda d: st_rewrite(p(d), lambda h: h.__setitem__(
            "__metadata__", {"format": 1})), [S1, "__metadata__"]),
        ("unknown dtype", lambda d: st_rewrite(p(d), lambda h: h[first_tensor(h)].__setitem__(
            "dtype", "F7")), ["F7"]),
        ("negative shape", lambda d: st_rewrite(p(d), shape_of(lambda k: True, lambda s: [-s[0]] +
                                                              s[1:])), [S1]),
        ("fractional shape", lambda d: st_rewrite(p(d), shape_of(lambda k: True, lambda s: [
            s[0] + 0.5] + s[1:])), [S1]),
        ("shape product overflows", lambda d: st_rewrite(p(d), shape_of(
            lambda k: True, lambda s: [2 ** 62, 2 ** 62])), [S1]),
        ("data_offsets of 3 entries", lambda d: st_rewrite(p(d), lambda h: h[first_tensor(
            h)].__setitem__("data_offsets", h[first_tensor(h)]["data_offsets"] + [0])), [S1]),
        ("data_offsets begin > end", lambda d: st_rewrite(p(d), lambda h: h[first_tensor(
            h)].__setitem__("data_offsets", h[first_tensor(h)]["data_offsets"][::-1])), [S1]),
        ("size != numel x dtype", lambda d: st_rewrite(p(d), shape_of(
            lambda k: True, lambda s: [s[0] - 1] + s[1:])), [S1]),
        ("two tensors aliasing one range", lambda d: st_rewrite(p(d), alias_layernorms), [S1]),
        ("trailing bytes", lambda d: st_rewrite(p(d), tail=lambda data: data + b"\x00" * 64),
         [S1]),
        ("truncated (last tensor cut in half)", lambda d: st_rewrite(p(d), raw=lambda hb, data: (
            lambda h, n: struct.pack("<Q", len(hb)) + hb + data[:(
                h[last_tensor(h)]["data_offsets"][0] + h[last_tensor(h)]["data_offsets"][1]) //
                2])(json.loads(hb), 0)), [S1]),
        ("index: ../x.safetensors", lambda d: edit_index(d, lambda j: j["weight_map"].__setitem__(
            first_tensor(j["weight_map"]), "../x.safetensors")), ["../x.safetensors"]),
        ("index: /etc/passwd", lambda d: edit_index(d, lambda j: j["weight_map"].__setitem__(
            first_tensor(j["weight_map"]), "/etc/passwd")), ["/etc/passwd"]),
        ("index: sub/../../x", lambda d: edit_index(d, lambda j: j["weight_map"].__setitem__(
            first_tensor(j["weight_map"]), "sub/../../x")), ["sub/../../x"]),
        ("index: symlink leaving the directory", lambda d: (
            shutil.move(os.path.join(d, S1), os.path.join(os.path.dirname(d), d + "-outside")),
            os.symlink(d + "-outside", os.path.join(d, S1))), [S1]),
        ("index: shard missing", lambda d: os.remove(os.path.join(d, S2)), [S2]),
        ("index: tensor not in the map", lambda d: edit_index(d, lambda j: j["weight_map"].pop(
            "model.embed_tokens.weight")), ["model.embed_tokens.weight"]),
        ("index: tensor in two shards", copy_embedding_into_s2, ["model.embed_tokens.weight"]),
        ("tensor shape != config (kv_a_proj_with_mqa)", lambda d: st_rewrite(p(d), shape_of(
            lambda k: k.endswith("kv_a_proj_with_mqa.weight"), lambda s: s[::-1])),
         ["kv_a_proj_with_mqa"]),
        ("required tensor missing (kv_b_proj)", lambda d: rename_tensor(
            d, S1, lambda k: k.endswith("kv_b_proj.weight")), ["kv_b_proj"]),
        ("FP8 weight_scale_inv missing", lambda d: rename_tensor(
            d, S1, lambda k: k.endswith("q_a_proj.weight_scale_inv")), ["weight_scale_inv",
                                                                        "q_a_proj"]),
        ("FP8 weight_scale_inv shape mismatch", lambda d: st_rewrite(p(d), shape_of(
            lambda k: k.endswith("q_a_proj.weight_scale_inv"), lambda s: [s[0] * s[1], 1])),
         ["weight_scale_inv", "q_a_proj"]),
    ]
    return [(n, "v3", f, w) for n, f, w in cases]


def config_cases():
    def setc(k, v):
        return lambda d: edit_config(d, lambda c: c.__setitem__(k, v))

    def rope(v):
        return lambda d: edit_config_text(d, lambda t: re.sub(r'"factor": [0-9.]+', f'"factor": {v}',
                                                               t, 1))

    cases = [
        ("config.json not JSON", lambda d: open(os.path.join(d, "config.json"), "w").write("{"),
         ["config.json"]),
        ("config: hidden_size missing", lambda d: edit_config(d, lambda c: c.pop("hidden_size")),
         ["hidden_size"]),
        ("config: hidden_size a string", setc("hidden_size", "64"), ["hidden_size"]),
        ("config: hidden_size 0", setc("hidden_size", 0), ["hidden_size"]),
        ("config: num_hidden_layers -1", setc("num_hidden_layers", -1), ["num_hidden_layers"]),
        ("config: num_attention_heads 0", setc("num_attention_heads", 0),
         ["num_attention_heads"]),
        ("config: kv_lora_rank 0", setc("kv_lora_rank", 0), ["kv_lora_rank"]),
        ("config: q_lora_rank -5", setc("q_lora_rank", -5), ["q_lora_rank"]),
        ("config: qk_nope_head_dim 0", setc("qk_nope_head_dim", 0), ["qk_nope_head_dim"]),
        ("config: qk_rope_head_dim -8", setc("qk_rope_head_dim", -8), ["qk_rope_head_dim"]),
        ("config: v_head_dim 0", setc("v_head_dim", 0), ["v_head_dim"]),
        ("config: num_experts_per_tok > n_routed_experts", setc("num_experts_per_tok", 99),
         ["num_experts_per_tok"]),
        ("config: first_k_dense_replace > layers", setc("first_k_dense_replace", 99),
         ["first_k_dense_replace"]),
        ("config: vocab_size != embedding rows", setc("vocab_size", 321),
         ["vocab_size", "embed_tokens"]),
        ("config: huge max_position_embeddings", setc("max_position_embeddings", 2 ** 62),
         ["max_position_embeddings"]),
        ("config: rope factor 0", rope("0"), ["factor", "rope_scaling"]),
        ("config: rope factor -1", rope("-1"), ["factor", "rope_scaling"]),
        ("config: rope factor NaN", rope("NaN"), ["factor", "rope_scaling", "config.json"]),
        ("config: rope factor Infinity", rope("Infinity"), ["factor", "rope_scaling",
                                                            "config.json"]),
        ("config: unknown torch_dtype", setc("torch_dtype", "float7"), ["torch_dtype",
                                                                         "float7"]),
        ("config: unknown quantization method", lambda d: edit_config(
            d, lambda c: c["quantization_config"].__setitem__("quant_method", "awq9")),
         ["quant_method", "awq9"]),
    ]
    return [(n, "v3", f, w) for n, f, w in cases]
