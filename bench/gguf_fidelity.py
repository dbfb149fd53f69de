#!/usr/bin/env python3
"""What each GGUF file type costs in accuracy, on one model: `mla quantize` writes the checkpoint
in every type, and each file's logits over a prompt are compared with the checkpoint's own
(docs/BENCHMARKS.md "GGUF file types: accuracy"). Both sides run with FP32 products and FP32
attention, so the difference is the weights' quantisation (and, for Q8_0 / Q4_0 on VNNI CPUs,
x's int8 quantisation inside the products).

  bench/gguf_fidelity.py MLA MODEL_DIR [--types q8_0,q6_k,q5_k_m,q4_k_m,q4_0] [--prompt-len 256]
                         [--keep DIR] [--engine-defaults]

--engine-defaults runs the files as `mla` runs them by default (prefill products on the int8
GEMM with x per 256 values, BF16 attention) against the same exact reference: the error a user
sees, not the weights' alone.

Prints, per type: file size, bits per weight of the file, mean KL(BF16 || type) of the
next-token distributions, top-1 agreement, RMS logit error over the logit RMS.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from logit_error import log_softmax, logits_of  # noqa: E402

EXACT = ["--matmul-dtype", "f32", "--attention-dtype", "f32"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mla")
    ap.add_argument("model")
    ap.add_argument("--types", default="q8_0,q6_k,q5_k_m,q4_k_m,q4_0")
    ap.add_argument("--prompt-len", type=int, default=256)
    ap.add_argument("--keep", help="write the .gguf files here (default: a temporary directory)")
    ap.add_argument("--engine-defaults", action="store_true",
                    help="run the files with the engine's default products and attention")
    a = ap.parse_args()
    tokens = [1 + i * 7919 % 100000 for i in range(a.prompt_len)]
    with tempfile.TemporaryDirectory() as tmp:
        where = a.keep or tmp
        os.makedirs(where, exist_ok=True)
        ref = logits_of(a.mla, a.model, tokens, "f32", EXACT, os.path.join(tmp, "ref"))
        lp_ref = log_softmax(ref)
        rms_ref = np.sqrt(np.mean(ref ** 2))
        print(f"{a.prompt_len} prompt rows, vocab {ref.shape[1]}, logit RMS {rms_ref:.3g}")
        print("| type | file bytes | mean KL | top-1 agreement | RMS error / logit RMS |")
        print("|---|---|---|---|---|")
        for t in a.types.split(","):
            path = os.path.join(where, f"model-{t}.gguf")
            if not os.path.exists(path):
                r = subprocess.run([a.mla, "quantize", "-m", a.model, "--type", t, "--out", path],
                                   capture_output=True, text=True)
                if r.returncode != 0:
                    sys.exit(f"quantize {t}: {r.stderr[-400:]}")
            lg = logits_of(a.mla, path, tokens, "f32", [] if a.engine_defaults else EXACT,
                           os.path.join(tmp, t))
            lp = log_softmax(lg)
            kl = np.sum(np.exp(lp_ref) * (lp_ref - lp), axis=1).mean()
            top1 = np.mean(lg.argmax(axis=1) == ref.argmax(axis=1))
            err = np.sqrt(np.mean((lg - ref) ** 2)) / rms_ref
            print(f"| {t} | {os.path.getsize(path)} | {kl:.3g} | {top1:.4f} | {err:.3g} |",
                  flush=True)


if __name__ == "__main__":
    main()
