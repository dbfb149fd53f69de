#!/usr/bin/env python3
"""Roofline plot of the MLA kernels on this machine (docs/roofline.png).

Runs `mla bench machine --json`, `mla bench decode --json` and `mla bench prefill --json` (or
reads their saved output with --from DIR), then draws the machine's roofs (BF16-dot and FP32-FMA
peaks, memory bandwidth) and each measured case at its arithmetic intensity.

Usage: scripts/plot_roofline.py [--mla build/release/bin/mla] [--out docs/roofline.png]
       [--from DIR]  (DIR holds machine.json, decode.json, prefill.json)
Needs matplotlib (pip install matplotlib==3.9.2; tooling only, not a test dependency).
"""
import argparse
import json
import os
import subprocess
import sys


def run_json(mla, args):
    out = subprocess.run([mla] + args + ["--json"], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mla", default="build/release/bin/mla")
    ap.add_argument("--out", default="docs/roofline.png")
    ap.add_argument("--from", dest="src", help="directory with machine.json, decode.json, prefill.json")
    ap.add_argument("--save", help="directory to save the measured JSON to")
    a = ap.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("matplotlib is not installed: pip install matplotlib==3.9.2")

    if a.src:
        load = lambda n: json.load(open(os.path.join(a.src, n + ".json")))
        machine, decode, prefill = load("machine"), load("decode"), load("prefill")
    else:
        machine = run_json(a.mla, ["bench", "machine"])
        decode = run_json(a.mla, ["bench", "decode", "--b", "1,4", "--h-q", "16,128", "--s-kv",
                                  "4096,16384", "--kv-dtype", "bf16,fp8_e4m3,int8,nvfp4"])
        prefill = run_json(a.mla, ["bench", "prefill", "--m", "256,1024", "--l", "4096"])
        if a.save:
            os.makedirs(a.save, exist_ok=True)
            for n, d in (("machine", machine), ("decode", decode), ("prefill", prefill)):
                json.dump(d, open(os.path.join(a.save, n + ".json"), "w"), indent=2)

    bw, bf16, fp32 = machine["mem_bw_gbps"], machine["bf16_dot_gflops"], machine["fp32_fma_gflops"]
    fig, ax = plt.subplots(figsize=(8, 5.5))
    xs = [0.5 * 1.25 ** i for i in range(60)]
    ax.plot(xs, [min(bf16, bw * x) for x in xs], "k-", label=f"BF16 dot {bf16:.0f} GFLOP/s, {bw:.1f} GB/s")
    ax.plot(xs, [min(fp32, bw * x) for x in xs], "k--", label=f"FP32 FMA {fp32:.0f} GFLOP/s")
    amx = machine.get("amx_bf16_gflops", 0)
    if amx:  # the AMX tile unit, where the CPU has one
        ax.plot(xs, [min(amx, bw * x) for x in xs], "k:", label=f"AMX BF16 {amx:.0f} GFLOP/s")
    marks = {"bf16": "o", "fp8_e4m3": "s", "int8": "^", "nvfp4": "D"}
    for c in decode:
        intensity = c["gflops"] / c["gbps"]  # FLOP per byte of cache (and q/out) read
        color = "tab:blue" if c["h_q"] == 128 else "tab:orange"
        ax.scatter(intensity, c["gflops"], marker=marks.get(c["kv_dtype"], "x"), color=color, zorder=3)
    ax.scatter([], [], color="tab:blue", label="decode h_q 128")
    ax.scatter([], [], color="tab:orange", label="decode h_q 16")
    for k, m in marks.items():
        ax.scatter([], [], marker=m, color="gray", label=f"cache {k}")
    for c in prefill:
        # Prefill intensity is high (weights and chunks reused): plot at a nominal 1000 FLOP/byte.
        ax.scatter(1000, c["gflops"], marker="*", s=120, color="tab:green" if c["path"] == "absorbed" else "tab:red",
                   zorder=3)
    ax.scatter([], [], marker="*", color="tab:green", label="prefill absorbed (nominal x)")
    ax.scatter([], [], marker="*", color="tab:red", label="prefill decompressed (nominal x)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("GFLOP/s")
    ax.set_title(f"MLA kernels on {machine['threads']} threads")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
