#!/usr/bin/env python3
"""A GGUF file written by mla's GgufWriter, read back by llama.cpp's own Python reader.

Usage: gguf_interop.py MLA_UNIT_IO

Runs the test binary's GgufInterop.WriteForPython with MLA_GGUF_INTEROP_OUT set, which writes
a GGUF file (every metadata type, string arrays, alignment 64, plain and block-quantised
tensors) and a JSON description of it; then opens the file with gguf.GGUFReader (the `gguf`
PyPI package, pinned gguf==0.19.0 in scripts/lib.sh) and compares. Exits 77 (skipped) when
`gguf` is not importable.
"""
import json
import os
import subprocess
import sys
import tempfile


def compare(reader, want):
    errors = []
    if reader.alignment != want["alignment"]:
        errors.append(f"alignment {reader.alignment}, expected {want['alignment']}")
    import numpy as np
    from gguf import GGUFValueType as V

    type_names = {V.UINT8: "u8", V.INT8: "i8", V.UINT16: "u16", V.INT16: "i16", V.UINT32: "u32",
                  V.INT32: "i32", V.FLOAT32: "f32", V.BOOL: "bool", V.STRING: "string",
                  V.ARRAY: "array", V.UINT64: "u64", V.INT64: "i64", V.FLOAT64: "f64"}
    fields = {k: f for k, f in reader.fields.items() if not k.startswith("GGUF.")}
    if set(fields) != set(want["metadata"]):
        errors.append(f"keys {sorted(fields)}, expected {sorted(want['metadata'])}")
    for key, w in want["metadata"].items():
        f = fields.get(key)
        if f is None:
            continue
        got_type = type_names[f.types[0]]
        if got_type != w["type"]:
            errors.append(f"{key}: type {got_type}, expected {w['type']}")
            continue
        elem = type_names[f.types[-1]] if got_type == "array" else got_type
        if got_type == "array" and elem != w["elem_type"]:
            errors.append(f"{key}: element type {elem}, expected {w['elem_type']}")
            continue
        got = f.contents()
        expected = w["value"]
        if elem == "f32":
            same = np.array_equal(np.float32(got), np.float32(expected))
        elif elem == "bool":
            same = (list(map(bool, got)) == expected if isinstance(expected, list)
                    else bool(got) == expected)
        else:
            same = got == expected
        if not same:
            errors.append(f"{key}: {got!r}, expected {expected!r}")
    if len(reader.tensors) != len(want["tensors"]):
        errors.append(f"{len(reader.tensors)} tensors, expected {len(want['tensors'])}")
    for t, w in zip(reader.tensors, want["tensors"]):
        if t.name != w["name"]:
            errors.append(f"tensor {t.name!r}, expected {w['name']!r}")
            continue
        if t.tensor_type.name != w["type"]:
            errors.append(f"{t.name}: type {t.tensor_type.name}, expected {w['type']}")
        ne = [int(x) for x in t.shape]
        if ne != list(reversed(w["shape"])):
            errors.append(f"{t.name}: ne {ne}, expected the reverse of {w['shape']}")
        if t.data_offset % want["alignment"] != 0:
            errors.append(f"{t.name}: data at {t.data_offset}, not aligned")
        if t.data.tobytes().hex() != w["hex"]:
            errors.append(f"{t.name}: bytes differ")
    return errors


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        import gguf  # noqa: F401
    except ImportError:
        print("skipped: the gguf package is not installed")
        return 77
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "mla.gguf")
        env = dict(os.environ, MLA_GGUF_INTEROP_OUT=out)
        r = subprocess.run([sys.argv[1], "--gtest_filter=GgufInterop.WriteForPython"], env=env,
                           capture_output=True, text=True, timeout=120)
        if r.returncode != 0 or not os.path.exists(out):
            print(r.stdout, r.stderr)
            print("FAIL: the test binary did not write", out)
            return 1
        with open(out + ".json", encoding="utf-8") as f:
            want = json.load(f)
        reader = gguf.GGUFReader(out)
        errors = compare(reader, want)
    for e in errors:
        print("FAIL:", e)
    if errors:
        return 1
    print(f"ok: gguf.GGUFReader reads {len(want['metadata'])} keys and {len(want['tensors'])} "
          "tensors as written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
