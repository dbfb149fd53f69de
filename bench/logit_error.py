#!/usr/bin/env python3
"""What each numerics default costs in accuracy, on one model: `mla generate --dump-activations`
with every setting against the all-FP32 run (FP32 weight products, FP32 attention, the
checkpoint's lm_head), over the logits of every prompt row (docs/BENCHMARKS.md "What the
defaults cost in accuracy").

  bench/logit_error.py MLA MODEL_DIR [--prompt-len 512] [--kv-dtype bf16]

Prints, per setting: the largest |logit error|, its RMS over the RMS of the logits, the mean
KL(FP32 || setting) of the next-token distributions, and the top-1 agreement.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "e2e"))
from model_fp64 import read_safetensors  # noqa: E402

SETTINGS = [
    ("all FP32 (reference)", ["--matmul-dtype", "f32", "--attention-dtype", "f32"]),
    ("--matmul-dtype bf16", ["--matmul-dtype", "bf16", "--attention-dtype", "f32"]),
    ("--attention-dtype bf16", ["--matmul-dtype", "f32", "--attention-dtype", "bf16"]),
    # int8 prefill tiles (prompts past the absorption threshold; decode stays bf16).
    ("--attention-dtype int8", ["--matmul-dtype", "f32", "--attention-dtype", "int8"]),
    # The absorbed path (the decode kernel) for the whole prompt: over an int8 cache (--kv-dtype
    # int8) int8 runs it on int8 dot products (MlaDecodeParams::int8_products), bf16 on BF16 ones.
    ("--attention-dtype bf16, absorbed path", ["--matmul-dtype", "f32", "--attention-dtype", "bf16",
                                               "--prefill-path", "absorbed"]),
    ("--attention-dtype int8, absorbed path", ["--matmul-dtype", "f32", "--attention-dtype", "int8",
                                               "--prefill-path", "absorbed"]),
    ("defaults (both bf16)", []),
    ("defaults + --lm-head-dtype fp8", ["--lm-head-dtype", "fp8"]),
    ("defaults + --lm-head-dtype int8", ["--lm-head-dtype", "int8"]),
    ("defaults + --weight-dtype q8_0", ["--weight-dtype", "q8_0"]),
    # The same with the BF16 prefill tiles in place of the int8 ones q8_0 picks by default.
    ("defaults + --weight-dtype q8_0, --attention-dtype bf16",
     ["--weight-dtype", "q8_0", "--attention-dtype", "bf16"]),
    # Its parts: with FP32 math (the products through the GEMV, x per 32 values) and on the
    # reference kernels (exact products of the Q8_0 weights: the weights' rounding alone).
    ("--weight-dtype q8_0, FP32 math", ["--weight-dtype", "q8_0", "--matmul-dtype", "f32",
                                        "--attention-dtype", "f32"]),
    ("--weight-dtype q8_0, reference kernels", ["--weight-dtype", "q8_0", "--backend", "ref",
                                                "--matmul-dtype", "f32", "--attention-dtype", "f32"]),
]


def logits_of(mla, model, tokens, kv, extra, out):
    cmd = [mla, "generate", "-m", model, "--tokens", ",".join(map(str, tokens)), "-n", "1",
           "--ignore-eos", "--kv-dtype", kv, "--dump-activations", out, *extra]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr[-400:]}")
    t, _ = read_safetensors(os.path.join(out, "activations.safetensors"))
    return t["logits"].astype(np.float64)


def log_softmax(x):
    x = x - x.max(axis=1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=1, keepdims=True))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mla")
    ap.add_argument("model")
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--kv-dtype", default="bf16")
    a = ap.parse_args()
    # A fixed spread of ids (no tokenizer needed): 1 + i·7919 mod 100000, as the other benches.
    tokens = [1 + i * 7919 % 100000 for i in range(a.prompt_len)]
    with tempfile.TemporaryDirectory() as tmp:
        runs = [(name, logits_of(a.mla, a.model, tokens, a.kv_dtype, extra, os.path.join(tmp, str(i))))
                for i, (name, extra) in enumerate(SETTINGS)]
    ref = runs[0][1]
    lp_ref = log_softmax(ref)
    rms_ref = np.sqrt(np.mean(ref ** 2))
    print(f"{a.prompt_len} prompt rows, vocab {ref.shape[1]}, logit RMS {rms_ref:.3g}")
    print("| setting | max abs error | RMS error / logit RMS | mean KL | top-1 agreement |")
    print("|---|---|---|---|---|")
    for name, lg in runs[1:]:
        e = np.abs(lg - ref)
        lp = log_softmax(lg)
        kl = np.sum(np.exp(lp_ref) * (lp_ref - lp), axis=1).mean()
        top1 = np.mean(lg.argmax(axis=1) == ref.argmax(axis=1))
        print(f"| {name} | {e.max():.3g} | {np.sqrt(np.mean(e ** 2)) / rms_ref:.3g} | {kl:.3g} | {top1:.4f} |")


if __name__ == "__main__":
    main()
