#!/usr/bin/env python3
"""Goldens of the GGUF block formats for tests/unit/core/ggml_quant_test.cc, made with the `gguf`
PyPI package (pinned gguf==0.19.0: llama.cpp's own numpy (de)quantisers) and numpy.

  python3 make_goldens.py               writes the files below next to this script
  python3 make_goldens.py check BINARY  the live comparison (CTest e2e.ggml_quant_live, BINARY is
                                        mla_unit_core); exits 77 (skipped) without gguf / numpy

Files (raw little-endian, sizes give the counts):
  <T>.blocks, <T>.f32  random valid blocks of T (Q8_0 ... Q6_K; F16 and BF16 as 2-byte values)
                       and gguf.quants.dequantize of them. Random bytes except the f16 scale
                       fields, which are random finite f16 values (every exponent, so subnormals,
                       and both signs) with a few fixed extremes (±0, ±smallest subnormal, ±65504).
  input.f32            4096 quantiser inputs: Gaussian rows of several magnitudes, exact rounding
                       ties of Q8_0 / Q4_0, zero, constant and outlier blocks, tiny values
  <T>.quant            gguf.quants.quantize(input, T) for T = Q8_0, Q4_0, F16, BF16 (the types
                       whose rounding gguf defines; the C++ quantiser must match them byte for byte)

`check` regenerates all of it in memory and compares with the committed files, then has BINARY
(--gtest_filter=GgmlQuantLive.*, MLA_GGML_QUANT_DIR=<tmp>) dequantise fresh random blocks and
quantise fresh Gaussian rows to every type it supports, and checks with gguf: the dequantised
values bit for bit (also of the C++ quantiser's own blocks) and the Q8_0 / Q4_0 / F16 / BF16
bytes. It prints each type's RMS error relative to the RMS of the data.
"""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

BLOCK_TYPES = ["Q8_0", "Q4_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"]
PLAIN_TYPES = ["F16", "BF16"]
QUANT_TYPES = ["Q8_0", "Q4_0", "F16", "BF16"]  # gguf defines their quantisation exactly
LIVE_QUANT_TYPES = ["Q8_0", "Q4_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "F16", "BF16"]

# Block size in bytes and the byte offsets of its f16 scale fields.
LAYOUT = {
    "Q8_0": (34, [0]),
    "Q4_0": (18, [0]),
    "Q2_K": (84, [80, 82]),
    "Q3_K": (110, [108]),
    "Q4_K": (144, [0, 2]),
    "Q5_K": (176, [0, 2]),
    "Q6_K": (210, [208]),
}
FIXED_HALVES = [0x0000, 0x8000, 0x0001, 0x8001, 0x7BFF, 0xFBFF, 0x03FF, 0x3C00]


def random_halves(rng, n):
    """Random finite f16 bit patterns: uniform sign, exponent field 0..30, mantissa."""
    import numpy as np
    sign = rng.integers(0, 2, n, dtype=np.uint16) << 15
    exp = rng.integers(0, 31, n, dtype=np.uint16) << 10
    mant = rng.integers(0, 1024, n, dtype=np.uint16)
    return sign | exp | mant


def random_blocks(rng, t, count):
    import numpy as np
    if t in PLAIN_TYPES:
        h = rng.integers(0, 1 << 16, count, dtype=np.uint16)
        h[: len(FIXED_HALVES)] = FIXED_HALVES
        if t == "F16":  # finite values only: NaN payloads are not part of the contract
            bad = (h & 0x7C00) == 0x7C00
            h[bad] &= 0xBFFF
        else:
            bad = (h & 0x7F80) == 0x7F80
            h[bad] &= 0xBFFF
        return h.view(np.uint8)
    size, fields = LAYOUT[t]
    b = rng.integers(0, 256, (count, size), dtype=np.uint8)
    for k, off in enumerate(fields):
        h = random_halves(rng, count)
        # The extremes in the first blocks, rotated per field so that d and dmin differ.
        fixed = np.roll(np.array(FIXED_HALVES, dtype=np.uint16), k)[:count]
        h[:len(fixed)] = fixed
        b[:, off:off + 2] = h.astype("<u2").view(np.uint8).reshape(count, 2)
    return b.reshape(-1)


def make_input(rng, n_superblocks):
    """Quantiser inputs: mostly Gaussian rows of varied magnitude, plus hand-made blocks."""
    import numpy as np
    x = np.empty((n_superblocks, 256), dtype=np.float32)
    scales = [1.0, 0.02, 3e3, 1e-4, 0.5, 7.0]
    for i in range(n_superblocks):
        x[i] = rng.standard_normal(256) * scales[i % len(scales)]
    x = x.reshape(-1, 32)
    # Exact ties of the reference rounding: Q8_0 with amax 127 (d = 1), Q4_0 with max -8 (d = 1).
    x[1] = np.array([127, -127] + [k + 0.5 for k in range(-15, 15)], dtype=np.float32)
    x[2] = np.array([-8] + [k / 2 for k in range(-15, 16)], dtype=np.float32)
    x[3] = 0
    x[4] = 0.375
    x[5] = -1.25
    x[6] = rng.standard_normal(32) * 0.01
    x[6, 17] = 40.0
    x[7] = rng.standard_normal(32) * 1e-30  # f16 scales underflow to 0 / subnormals
    x[8] = rng.standard_normal(32) * 1e-6
    x[9, :16] = 1e4
    x[9, 16:] = -1e4
    return x.reshape(-1)


def goldens(seed=20250601):
    """{file name: bytes} of every committed golden."""
    import numpy as np
    from gguf import GGMLQuantizationType as Q
    from gguf import quants
    rng = np.random.default_rng(seed)
    files = {}
    for t in BLOCK_TYPES + PLAIN_TYPES:
        count = {"Q8_0": 64, "Q4_0": 64, "F16": 1024, "BF16": 1024}.get(t, 12)
        blocks = random_blocks(rng, t, count)
        files[f"{t}.blocks"] = blocks.tobytes()
        files[f"{t}.f32"] = quants.dequantize(blocks, Q[t]).astype("<f4").tobytes()
    x = make_input(rng, 16)
    files["input.f32"] = x.astype("<f4").tobytes()
    for t in QUANT_TYPES:
        files[f"{t}.quant"] = np.ascontiguousarray(quants.quantize(x, Q[t])).view(np.uint8).tobytes()
    return files


def write():
    for name, data in goldens().items():
        with open(os.path.join(HERE, name), "wb") as f:
            f.write(data)
    print(f"wrote {len(goldens())} files to {HERE}")


def check(binary):
    try:
        import numpy as np
        from gguf import GGMLQuantizationType as Q
        from gguf import quants
    except ImportError as e:
        print(f"skipped: {e.name} is not installed")
        return 77
    import importlib.metadata
    errors = []
    version = importlib.metadata.version("gguf")
    if version != "0.19.0":
        print(f"note: gguf {version}, the goldens were made with 0.19.0")
    for name, data in goldens().items():
        with open(os.path.join(HERE, name), "rb") as f:
            if f.read() != data:
                errors.append(f"committed {name} differs from what gguf {version} makes now")

    rng = np.random.default_rng(7)
    with tempfile.TemporaryDirectory() as d:
        fresh = {}
        for t in BLOCK_TYPES + PLAIN_TYPES:
            fresh[t] = random_blocks(rng, t, 4096 if t in PLAIN_TYPES else 512)
            fresh[t].tofile(os.path.join(d, f"{t}.blocks"))
        x = make_input(rng, 64)
        x.astype("<f4").tofile(os.path.join(d, "input.f32"))
        env = dict(os.environ, MLA_GGML_QUANT_DIR=d)
        r = subprocess.run([binary, "--gtest_filter=GgmlQuantLive.*"], env=env,
                           capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            print(r.stdout, r.stderr)
            print("FAIL: the test binary failed")
            return 1

        def load(name, dtype):
            path = os.path.join(d, name)
            if not os.path.exists(path):
                errors.append(f"the test binary did not write {name}")
                return None
            return np.fromfile(path, dtype=dtype)

        def same_bits(a, b):
            return a is not None and a.shape == b.shape and np.array_equal(
                a.view(np.uint32), b.astype(np.float32).view(np.uint32))

        for t in BLOCK_TYPES + PLAIN_TYPES:
            got = load(f"{t}.mla.f32", "<f4")
            if got is not None and not same_bits(got, quants.dequantize(fresh[t], Q[t])):
                errors.append(f"{t}: dequantised random blocks differ from gguf's")
        for t in LIVE_QUANT_TYPES:
            blocks = load(f"{t}.mla.quant", np.uint8)
            ours = load(f"{t}.mla.quant.f32", "<f4")
            if blocks is None or ours is None:
                continue
            theirs = quants.dequantize(blocks, Q[t])
            if not same_bits(ours, theirs):
                errors.append(f"{t}: gguf dequantises mla's blocks differently")
            if t in QUANT_TYPES:
                want = np.ascontiguousarray(quants.quantize(x, Q[t])).view(np.uint8)
                if not np.array_equal(blocks, want):
                    n = int(np.count_nonzero(blocks != want))
                    errors.append(f"{t}: mla's quantised bytes differ from gguf's ({n} bytes)")
            # Per-row relative RMS (rows of different magnitude weigh the same).
            rows = x.reshape(-1, 256).astype(np.float64)
            err = theirs.reshape(-1, 256) - rows
            rel = np.sqrt(np.mean(err ** 2, axis=1)) / np.maximum(
                np.sqrt(np.mean(rows ** 2, axis=1)), 1e-300)
            print(f"{t:5s} median relative RMS error {np.median(rel):.5f}")
    for e in errors:
        print("FAIL:", e)
    if errors:
        return 1
    print("ok: goldens reproduce, and gguf agrees with mla's dequantiser and quantiser bit for bit")
    return 0


def main():
    if len(sys.argv) == 1:
        write()
        return 0
    if len(sys.argv) == 3 and sys.argv[1] == "check":
        return check(sys.argv[2])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
