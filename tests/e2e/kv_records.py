# Quantised KV-cache records (docs/kernels/kv_formats.md) for the independent numpy oracle of
# `mla attention`.
#
# Written from the documented layouts and scale rules (src/core/kv_format.h and
# docs/kernels/kv_formats.md), not from the engine's code, so that goldens made with it check the
# engine rather than restate it.
#
# One token's record is [latent | scales | rope | padding]; each section starts at a multiple of
# its element size (fp32 scales 4, e4m3 scales 1, BF16 rope 2) and the record is padded with zero
# bytes to a multiple of 16:
#   fp8_e4m3: r e4m3 codes, ceil(r/128) fp32 scales (amax/448), d_r BF16 rope   (656 at 512/64)
#   int8:     r int8 codes in [-127, 127], ceil(r/128) fp32 scales (amax/127), rope (656)
#   nvfp4:    ceil(r/2) bytes of e2m1 pairs (low nibble first), ceil(r/16) e4m3 block scales,
#             rope (416); the layer's fp32 global scale g lives outside the record.
# Dequantised values are the FP32 products code·scale (nvfp4: (code·s)·g), RoPE is BF16 widened.
#
# Everything here is vectorised over rows: quantise_rows([N, r + d_r] f32) -> [N, record] u8 and
# dequantise_records([N, record] u8) -> [N, r + d_r] f32.
import numpy as np

FORMATS = ("fp8_e4m3", "int8", "nvfp4")
FP8_BLOCK = 128  # values per fp32 scale (fp8_e4m3 and int8)
NVFP4_BLOCK = 16  # values per e4m3 block scale
RECORD_ALIGN = 16
E4M3_MAX = 448.0
E2M1_MAX = 6.0
INT8_MAX = 127
# kNvfp4DefaultGlobalScale = 1.0f / 6.0f, an FP32 division (not the double 1/6 rounded).
NVFP4_DEFAULT_GLOBAL_SCALE = np.float32(1.0) / np.float32(6.0)


def _align(n, a):
    return (n + a - 1) // a * a


def record_layout(fmt, r, d_r):
    """Byte offsets and sizes of one record: a dict with latent/scale/rope offsets and sizes and
    record_bytes."""
    if fmt in ("fp8_e4m3", "int8"):
        latent_bytes, scale_elem, n_scales = r, 4, -(-r // FP8_BLOCK)
    elif fmt == "nvfp4":
        latent_bytes, scale_elem, n_scales = -(-r // 2), 1, -(-r // NVFP4_BLOCK)
    else:
        raise ValueError(f"unknown quantised kv format {fmt!r} (have {', '.join(FORMATS)})")
    scale_off = _align(latent_bytes, scale_elem)
    scale_bytes = n_scales * scale_elem
    rope_off = _align(scale_off + scale_bytes, 2)
    rope_bytes = 2 * d_r
    return {"latent_offset": 0, "latent_bytes": latent_bytes, "scale_offset": scale_off,
            "scale_bytes": scale_bytes, "n_scales": n_scales, "rope_offset": rope_off,
            "rope_bytes": rope_bytes, "record_bytes": _align(rope_off + rope_bytes, RECORD_ALIGN)}


# ---------------------------------------------------------------------------------------------
# Element codecs.

def _e4m3_value(code):
    """Value of an e4m3 (OCP "fn": bias 7, no infinities, S.1111.111 = NaN) code 0..255."""
    sign = -1.0 if code & 0x80 else 1.0
    e, m = (code >> 3) & 0xF, code & 0x7
    if e == 0xF and m == 0x7:
        return float("nan")
    if e == 0:
        return sign * m * 2.0**-9  # subnormal: 2^-6 · m/8
    return sign * 2.0 ** (e - 7) * (1.0 + m / 8.0)


E4M3_TABLE = np.array([_e4m3_value(c) for c in range(256)], dtype=np.float32)
# The e2m1 magnitudes of codes 0..7; bit 3 is the sign.
E2M1_MAGNITUDES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=np.float32)
E2M1_TABLE = np.concatenate([E2M1_MAGNITUDES, -E2M1_MAGNITUDES]).astype(np.float32)
_E4M3_POSITIVE = E4M3_TABLE[:127].astype(np.float64)  # codes 0..126, increasing, max 448


def _round_to_grid(mag, grid):
    """mag (float32, >= 0, not above grid[-1]) -> index of the nearest grid value, ties to the even
    index (the even code: the last mantissa bit is the code's last bit). grid: increasing float64."""
    a = mag.astype(np.float64)
    hi = np.clip(np.searchsorted(grid, a, side="left"), 0, len(grid) - 1)
    lo = np.clip(hi - 1, 0, len(grid) - 1)
    d_lo, d_hi = a - grid[lo], grid[hi] - a  # exact in float64
    pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0))
    return np.where(pick_hi, hi, lo).astype(np.uint8)


def f32_to_e4m3(x):
    """Round to nearest even, saturating at ±448 (no NaN for finite inputs)."""
    x = np.asarray(x, dtype=np.float32)
    mag = np.minimum(np.abs(x), np.float32(E4M3_MAX))
    return _round_to_grid(mag, _E4M3_POSITIVE) | np.where(np.signbit(x), np.uint8(0x80), np.uint8(0))


def f32_to_e2m1(x):
    """Round to nearest even, saturating at ±6; one code (0..15) per uint8."""
    x = np.asarray(x, dtype=np.float32)
    mag = np.minimum(np.abs(x), np.float32(E2M1_MAX))
    return _round_to_grid(mag, E2M1_MAGNITUDES.astype(np.float64)) | np.where(np.signbit(x), np.uint8(8), np.uint8(0))


def _bf16_bits(x):
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)  # RNE; inputs here are finite


def _bf16_value(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


# ---------------------------------------------------------------------------------------------
# Rows <-> records.

def _blocks(latent, block):
    """[N, r] -> [N, nblocks, block] zero-padded (zeros change no amax)."""
    n, r = latent.shape
    nb = -(-r // block)
    padded = np.zeros((n, nb * block), dtype=np.float32)
    padded[:, :r] = latent
    return padded.reshape(n, nb, block)


def quantise_rows(fmt, r, d_r, rows, global_scale=NVFP4_DEFAULT_GLOBAL_SCALE):
    """rows [N, r + d_r] float32 (finite) -> records [N, record_bytes] uint8."""
    rows = np.ascontiguousarray(rows, dtype=np.float32)
    n = rows.shape[0]
    assert rows.shape == (n, r + d_r), rows.shape
    lay = record_layout(fmt, r, d_r)
    rec = np.zeros((n, lay["record_bytes"]), dtype=np.uint8)
    latent = rows[:, :r]
    with np.errstate(divide="ignore", invalid="ignore"):
        if fmt in ("fp8_e4m3", "int8"):
            blk = _blocks(latent, FP8_BLOCK)
            amax = np.abs(blk).max(axis=-1)  # [N, nb] float32
            scale = (amax / np.float32(E4M3_MAX if fmt == "fp8_e4m3" else INT8_MAX)).astype(np.float32)
            ratio = (blk / scale[..., None]).astype(np.float32)  # FP32 division
            ratio = np.where(scale[..., None] == 0, np.float32(0), ratio)  # all-zero block: codes 0
            if fmt == "fp8_e4m3":
                codes = f32_to_e4m3(ratio)
            else:
                codes = np.clip(np.rint(ratio), -INT8_MAX, INT8_MAX).astype(np.int8).view(np.uint8)
            codes = codes.reshape(n, -1)[:, :r]
            scale_bytes = scale.astype("<f4").view(np.uint8).reshape(n, -1)
        elif fmt == "nvfp4":
            g = np.float32(global_scale)
            blk = _blocks(latent, NVFP4_BLOCK)
            amax = np.abs(blk).max(axis=-1)
            s_code = f32_to_e4m3((amax / (np.float32(6.0) * g)).astype(np.float32))
            # Round the block scale up one code when s·g would clip the block's amax (amax/(s·g) > 6;
            # s = 0 for a non-zero block counts as clipping). All-zero blocks keep s = 0.
            sg = (E4M3_TABLE[s_code] * g).astype(np.float32)
            clips = (amax > 0) & ((amax / sg).astype(np.float32) > np.float32(E2M1_MAX)) & (s_code < 126)
            s_code = np.where(clips, s_code + 1, s_code).astype(np.uint8)
            sg = (E4M3_TABLE[s_code] * g).astype(np.float32)
            ratio = (blk / sg[..., None]).astype(np.float32)
            ratio = np.where(sg[..., None] == 0, np.float32(0), ratio)
            codes4 = f32_to_e2m1(ratio).reshape(n, -1)[:, :r]
            if r % 2:
                codes4 = np.concatenate([codes4, np.zeros((n, 1), dtype=np.uint8)], axis=1)
            codes = (codes4[:, 0::2] | (codes4[:, 1::2] << 4)).astype(np.uint8)  # low nibble first
            scale_bytes = s_code
        else:
            raise ValueError(f"unknown quantised kv format {fmt!r}")
    rec[:, : lay["latent_bytes"]] = codes
    rec[:, lay["scale_offset"] : lay["scale_offset"] + lay["scale_bytes"]] = scale_bytes
    rope = _bf16_bits(rows[:, r:]).astype("<u2").view(np.uint8).reshape(n, -1)
    rec[:, lay["rope_offset"] : lay["rope_offset"] + lay["rope_bytes"]] = rope
    return rec


def dequantise_records(fmt, r, d_r, records, global_scale=NVFP4_DEFAULT_GLOBAL_SCALE):
    """records [N, record_bytes] uint8 -> rows [N, r + d_r] float32, the values they represent.
    Garbage records (e.g. 0xFF fill) give NaN where a scale or code is NaN, as a reader would."""
    records = np.ascontiguousarray(records, dtype=np.uint8)
    n = records.shape[0]
    lay = record_layout(fmt, r, d_r)
    if records.shape[1] != lay["record_bytes"]:
        raise ValueError(f"{fmt} record of r={r}, d_r={d_r} is {lay['record_bytes']} bytes, got {records.shape[1]}")
    rows = np.empty((n, r + d_r), dtype=np.float32)
    codes = records[:, : lay["latent_bytes"]]
    scales_raw = np.ascontiguousarray(records[:, lay["scale_offset"] : lay["scale_offset"] + lay["scale_bytes"]])
    block_of = np.arange(r)
    with np.errstate(invalid="ignore", over="ignore"):
        if fmt in ("fp8_e4m3", "int8"):
            scale = scales_raw.view("<f4").astype(np.float32)  # [N, nb]
            vals = E4M3_TABLE[codes] if fmt == "fp8_e4m3" else codes.view(np.int8).astype(np.float32)
            rows[:, :r] = (vals * scale[:, block_of // FP8_BLOCK]).astype(np.float32)
        else:
            g = np.float32(global_scale)
            s = E4M3_TABLE[scales_raw]  # [N, nb]
            nib = np.empty((n, 2 * codes.shape[1]), dtype=np.uint8)
            nib[:, 0::2] = codes & 0xF
            nib[:, 1::2] = codes >> 4
            vals = E2M1_TABLE[nib[:, :r]]
            rows[:, :r] = ((vals * s[:, block_of // NVFP4_BLOCK]).astype(np.float32) * g).astype(np.float32)
    rope = np.ascontiguousarray(records[:, lay["rope_offset"] : lay["rope_offset"] + lay["rope_bytes"]])
    rows[:, r:] = _bf16_value(rope.view("<u2"))
    return rows


def block_amax(fmt, r, rows):
    """Per-element amax of the scale block it belongs to ([N, r] float32), for error reports."""
    block = NVFP4_BLOCK if fmt == "nvfp4" else FP8_BLOCK
    amax = np.abs(_blocks(np.asarray(rows, dtype=np.float32)[:, :r], block)).max(axis=-1)
    return amax[:, np.arange(r) // block]


def self_test():
    """Hand-checked codes of the element codecs and one record per format; raises on a mismatch."""
    assert E4M3_TABLE[0x7E] == 448 and np.isnan(E4M3_TABLE[0x7F]) and np.isnan(E4M3_TABLE[0xFF])
    assert E4M3_TABLE[0x38] == 1 and E4M3_TABLE[0x01] == 2.0**-9 and E4M3_TABLE[0x08] == 2.0**-6
    assert E4M3_TABLE[0xC0] == -2
    got = f32_to_e4m3(np.array([1.0, 1.0625, 1.1875, 500.0, -3.0, 2.0**-10, 1.5 * 2.0**-9, 0.0],
                               dtype=np.float32))
    # 1.0625 ties between 1 (0x38) and 1.125 (0x39): even; 1.1875 ties 1.125/1.25: to 1.25 (0x3A);
    # 500 saturates; 2^-10 ties 0 / 2^-9: to 0; 1.5·2^-9 ties codes 1/2: to 2.
    assert list(got) == [0x38, 0x38, 0x3A, 0x7E, 0xC4, 0x00, 0x02, 0x00], [hex(c) for c in got]
    got = f32_to_e2m1(np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0, -0.5, -6.0], dtype=np.float32))
    assert list(got) == [0, 2, 2, 4, 4, 6, 6, 7, 9, 15], list(got)
    assert record_layout("fp8_e4m3", 512, 64)["record_bytes"] == 656
    assert record_layout("int8", 512, 64)["record_bytes"] == 656
    assert record_layout("nvfp4", 512, 64)["record_bytes"] == 416
    lay = record_layout("nvfp4", 136, 64)
    assert (lay["scale_offset"], lay["scale_bytes"], lay["rope_offset"], lay["record_bytes"]) == (68, 9, 78, 208)
    # fp8: block amax 448 -> scale 1, codes are the values.
    row = np.zeros((1, 130), dtype=np.float32)
    row[0, :3] = [448.0, -1.0, 0.5]
    row[0, 128:] = [1.0, -2.0]
    rec = quantise_rows("fp8_e4m3", 128, 2, row)
    assert list(rec[0, :3]) == [0x7E, 0xB8, 0x30] and rec[0, 128:132].view("<f4")[0] == 1.0
    assert list(rec[0, 132:136].view("<u2")) == [0x3F80, 0xC000] and not rec[0, 136:].any()
    # int8: amax 127 -> scale 1; 2.5 rounds to 2 (half even), -3.5 to -4.
    row = np.zeros((1, 128), dtype=np.float32)
    row[0, :4] = [127.0, 2.5, -3.5, 0.0]
    rec = quantise_rows("int8", 128, 0, row)
    assert list(rec[0, :4].view(np.int8)) == [127, 2, -4, 0] and rec[0, 128:132].view("<f4")[0] == 1.0
    # nvfp4 with g = 1/6: s = e4m3(amax); amax 3 -> s 3 (0x44), codes x/(3/6) = 2x.
    row = np.zeros((1, 32), dtype=np.float32)
    row[0, :3] = [3.0, -0.25, 1.0]
    rec = quantise_rows("nvfp4", 32, 0, row)
    assert list(rec[0, :2]) == [0x7 | (0x9 << 4), 0x4] and list(rec[0, 16:18]) == [0x44, 0x00], list(rec[0])
    # amax 3.3 -> e4m3 nearest 3.25 (0x45) would clip (3.3/(3.25/6) > 6): rounded up to 3.5 (0x46).
    row[0, 0] = 3.3
    rec = quantise_rows("nvfp4", 32, 0, row)
    assert rec[0, 16] == 0x46, hex(rec[0, 16])
    back = dequantise_records("nvfp4", 32, 0, rec)
    assert back[0, 0] == np.float32(np.float32(6.0 * 3.5) * NVFP4_DEFAULT_GLOBAL_SCALE)
    # 0xFF fill reads as NaN in every format.
    for fmt in FORMATS:
        lay = record_layout(fmt, 136, 64)
        bad = dequantise_records(fmt, 136, 64, np.full((1, lay["record_bytes"]), 0xFF, dtype=np.uint8))
        assert np.isnan(bad).all(), fmt
