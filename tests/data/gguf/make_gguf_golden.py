#!/usr/bin/env python3
"""Writes the GGUF goldens of tests/unit/io/gguf_test.cc with the `gguf` PyPI package (pinned
gguf==0.19.0, llama.cpp's own Python writer), so that the C++ reader is checked against files it
did not write:

  golden.gguf                       metadata of every value type, F32 / F16 / Q8_0 / Q4_K / I32
                                    tensors of known content
  golden-split-0000N-of-00002.gguf  a two-file split set (one tensor per file; the default
                                    alignment: gguf 0.19.0 writes a custom one into the first file
                                    only, which leaves the other files unreadable)
  golden.json                       what the C++ test expects of both: metadata values with their
                                    types, and per tensor the ggml type, row-major shape, byte
                                    size, bytes (hex) and values (dequantized for block types)

Deterministic: fixed inputs, no clock or randomness. Run from anywhere:
    python3 tests/data/gguf/make_gguf_golden.py
"""
import importlib.metadata
import json
import os
import sys

import numpy as np

import gguf
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType as V

HERE = os.path.dirname(os.path.abspath(__file__))

# (key, type, value): every scalar type, and arrays of several element types.
METADATA = [
    ("test.u8", V.UINT8, 200),
    ("test.i8", V.INT8, -100),
    ("test.u16", V.UINT16, 60000),
    ("test.i16", V.INT16, -30000),
    ("test.u32", V.UINT32, 4000000000),
    ("test.i32", V.INT32, -2000000000),
    ("test.u64", V.UINT64, 1 << 62),
    ("test.i64", V.INT64, -(1 << 62)),
    ("test.f32", V.FLOAT32, 0.15625),
    ("test.f64", V.FLOAT64, -1.0e300),
    ("test.bool_true", V.BOOL, True),
    ("test.bool_false", V.BOOL, False),
    ("test.string", V.STRING, "DeepSeek 深度求索 ✓"),
    ("tokenizer.ggml.tokens", (V.ARRAY, V.STRING), ["<s>", "</s>", "Ġthe", "深", "", "\n"]),
    ("tokenizer.ggml.token_type", (V.ARRAY, V.INT32), [3, 3, 1, 1, 1, 6]),
    ("test.arr_u8", (V.ARRAY, V.UINT8), [0, 1, 255]),
    ("test.arr_i64", (V.ARRAY, V.INT64), [-(1 << 40), 0, 1 << 40]),
    ("test.arr_f32", (V.ARRAY, V.FLOAT32), [0.5, -2.25, 1e-3]),
    ("test.arr_f64", (V.ARRAY, V.FLOAT64), [3.141592653589793, -0.0]),
    ("test.arr_bool", (V.ARRAY, V.BOOL), [True, False, True]),
]


def add_metadata(w):
    w.add_uint32("deepseek2.block_count", 1)
    for key, vtype, value in METADATA:
        if isinstance(vtype, tuple):
            w.add_key_value(key, value, vtype[0], sub_type=vtype[1])
        else:
            w.add_key_value(key, value, vtype)


def f16_bytes(x):
    return np.array([x], dtype=np.float16).tobytes()


def q4_k_blocks(rows):
    """Q4_K rows (256 values each, 144 bytes) with finite scales and patterned codes."""
    out = np.zeros((rows, 144), dtype=np.uint8)
    for r in range(rows):
        out[r, 0:2] = np.frombuffer(f16_bytes(0.03125 * (r + 1)), dtype=np.uint8)  # d
        out[r, 2:4] = np.frombuffer(f16_bytes(0.0078125), dtype=np.uint8)  # dmin
        out[r, 4:16] = [(7 * k + 3 * r + 1) % 64 for k in range(12)]  # 6-bit scales and mins
        out[r, 16:144] = [(37 * k + 11 * r) % 256 for k in range(128)]  # 4-bit code pairs
    return out


def tensors():
    """(name, data for add_tensor, raw ggml type or None, values to record)."""
    f32 = (np.arange(12, dtype=np.float32) * 0.25 - 1.0).reshape(3, 4)
    f16 = (np.arange(16, dtype=np.float32) / 8.0 - 1.0).astype(np.float16).reshape(2, 8)
    src = np.array([((k * 13) % 29 - 14) / 7.0 for k in range(128)], dtype=np.float32).reshape(2, 64)
    q8 = gguf.quants.quantize(src, Q.Q8_0)
    q4k = q4_k_blocks(2)
    ids = np.array([5, -1, 0, 2147483647, -2147483648], dtype=np.int32)
    f32_3d = np.array([1.0, -1.0, 0.5, -0.5, 2.0, -2.0], dtype=np.float32).reshape(2, 1, 3)
    return [
        ("blk.0.f32.weight", f32, None),
        ("blk.0.f16.weight", f16, None),
        ("blk.0.q8_0.weight", q8, Q.Q8_0),
        ("blk.0.q4_k.weight", q4k, Q.Q4_K),
        ("blk.0.ids", ids, None),
        ("blk.0.f32_3d", f32_3d, None),
    ]


def record(name, data, raw):
    ggml_type = raw if raw is not None else {
        np.dtype(np.float32): Q.F32, np.dtype(np.float16): Q.F16, np.dtype(np.int32): Q.I32,
    }[data.dtype]
    if raw is not None:
        values = gguf.quants.dequantize(data, raw)
        shape = list(values.shape)
        values = [float(v) for v in values.reshape(-1)]
    else:
        shape = list(data.shape)
        values = [float(v) if data.dtype.kind == "f" else int(v) for v in data.reshape(-1)]
    return {
        "name": name,
        "type": ggml_type.name,
        "shape": shape,
        "byte_size": int(data.nbytes),
        "hex": data.tobytes().hex(),
        "values": values,
    }


def json_value(vtype, value):
    if isinstance(vtype, tuple):
        return {"type": "array", "elem_type": type_name(vtype[1]), "value": value}
    return {"type": type_name(vtype), "value": value}


def type_name(v):
    return {V.UINT8: "u8", V.INT8: "i8", V.UINT16: "u16", V.INT16: "i16", V.UINT32: "u32",
            V.INT32: "i32", V.FLOAT32: "f32", V.BOOL: "bool", V.STRING: "string",
            V.UINT64: "u64", V.INT64: "i64", V.FLOAT64: "f64"}[v]


def compact_json(x, indent=""):
    """Objects one member a line; lists and tensor records on one line each."""
    if isinstance(x, dict) and "hex" not in x and "value" not in x:
        inner = indent + " "
        members = [f"{inner}{json.dumps(k, ensure_ascii=False)}: {compact_json(v, inner)}"
                   for k, v in x.items()]
        return "{\n" + ",\n".join(members) + "\n" + indent + "}"
    if isinstance(x, list) and x and isinstance(x[0], dict):
        inner = indent + " "
        return "[\n" + ",\n".join(inner + compact_json(v, inner) for v in x) + "\n" + indent + "]"
    return json.dumps(x, ensure_ascii=False)


def main():
    version = importlib.metadata.version("gguf")
    if version != "0.19.0":
        print(f"gguf {version} is installed; the goldens are made with gguf==0.19.0", file=sys.stderr)
        return 1
    path = os.path.join(HERE, "golden.gguf")
    w = gguf.GGUFWriter(path, "deepseek2")
    add_metadata(w)
    recs = []
    for name, data, raw in tensors():
        w.add_tensor(name, data, raw_dtype=raw)
        recs.append(record(name, data, raw))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    split_base = os.path.join(HERE, "golden-split.gguf")
    s = gguf.GGUFWriter(split_base, "deepseek2", split_max_tensors=1)
    s.add_string("general.name", "split golden")
    split_recs = []
    for k in range(2):
        data = np.arange(4 * (k + 1), dtype=np.float32).reshape(k + 1, 4) + 100 * k
        s.add_tensor(f"split.t{k}", data)
        split_recs.append(record(f"split.t{k}", data, None))
    s.write_header_to_file()
    s.write_kv_data_to_file()
    s.write_tensors_to_file()
    s.close()

    expected = {
        "generator": "gguf==0.19.0 (tests/data/gguf/make_gguf_golden.py)",
        "file": "golden.gguf",
        "metadata": {"general.architecture": {"type": "string", "value": "deepseek2"},
                     "deepseek2.block_count": {"type": "u32", "value": 1},
                     **{k: json_value(t, v) for k, t, v in METADATA}},
        "tensors": recs,
        "split": {
            "files": ["golden-split-00001-of-00002.gguf", "golden-split-00002-of-00002.gguf"],
            "tensors": split_recs,
        },
    }
    with open(os.path.join(HERE, "golden.json"), "w", encoding="utf-8") as f:
        f.write(compact_json(expected) + "\n")
    for p in [path] + [os.path.join(HERE, n) for n in expected["split"]["files"]]:
        print(p, os.path.getsize(p), "bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
