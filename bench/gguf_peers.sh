#!/usr/bin/env bash
# One GGUF file (for instance one `mla quantize` wrote) run by mla, llama.cpp and ik_llama.cpp,
# interleaved, every round listed: prefill PP and decode TG (docs/BENCHMARKS.md "GGUF files").
# A read probe (`mla bench machine`, ~1 s) runs right before each engine: the shared
# host's bandwidth drifts between runs, and decode tokens/s per probe GB/s compares the engines
# on the same file (the same bytes per token) whatever the drift.
#   bench/gguf_peers.sh FILE.gguf [LLAMA_BENCH [IK_LLAMA_BENCH]]
# The llama-bench binaries default to the ones bench/peers.sh builds under /work/peers/work.
# Environment: ROUNDS=2 THREADS=2 PP=512 TG=64 MLA_BIN=build/release/bin/mla
#   MLA_ARGS (extra `mla bench model` flags, e.g. "--repack off"; split into words)
#   IK_CONFIGS="-mla 3 -fa 1 -fmoe 1;-mla 3 -fa 1 -fmoe 1 -rtr 1"
set -euo pipefail
file=${1:?usage: bench/gguf_peers.sh FILE.gguf [LLAMA_BENCH [IK_LLAMA_BENCH]]}
llama=${2:-/work/peers/work/build/llama.cpp/bin/llama-bench}
ik=${3:-/work/peers/work/build/ik_llama.cpp/bin/llama-bench}
ROUNDS=${ROUNDS:-2} THREADS=${THREADS:-2} PP=${PP:-512} TG=${TG:-64}
MLA_BIN=${MLA_BIN:-build/release/bin/mla}
MLA_ARGS=${MLA_ARGS:-}
IK_CONFIGS=${IK_CONFIGS:-"-mla 3 -fa 1 -fmoe 1;-mla 3 -fa 1 -fmoe 1 -rtr 1"}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
IFS=';' read -r -a ik_sets <<<"$IK_CONFIGS"
probe() { # $1: output file; the all-threads read bandwidth in GB/s
  "$MLA_BIN" bench machine --json 2>/dev/null |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["mem_bw_gbps"])' >"$1"
}
for ((r = 1; r <= ROUNDS; r++)); do
  cat "$file" >/dev/null # in the page cache before each engine, untimed
  probe "$out/mla.$r.probe"
  # shellcheck disable=SC2086 # MLA_ARGS: flags, split on purpose
  "$MLA_BIN" bench model -m "$file" --threads "$THREADS" --prompt-len "$PP" --tokens "$TG" $MLA_ARGS \
    --json >"$out/mla.$r.json" 2>/dev/null
  probe "$out/llama.cpp.$r.probe"
  "$llama" -m "$file" -t "$THREADS" -r 1 -o json -p "$PP" -n "$TG" >"$out/llama.cpp.$r.json" 2>/dev/null
  for i in "${!ik_sets[@]}"; do
    probe "$out/ik_llama.cpp[${ik_sets[$i]}].$r.probe"
    # shellcheck disable=SC2086
    "$ik" -m "$file" -t "$THREADS" -r 1 -o json -p "$PP" -n "$TG" ${ik_sets[$i]} \
      >"$out/ik_llama.cpp[${ik_sets[$i]}].$r.json" 2>/dev/null
  done
done
python3 - "$out" "$ROUNDS" <<'PY'
import glob, json, os, sys
out, rounds = sys.argv[1], int(sys.argv[2])
import statistics
print("| engine | prefill tok/s (per round) | decode tok/s (per round) | read probe GB/s before | "
      "decode tok/s per probe GB/s (median) |")
print("|---|---|---|---|---|")
names = sorted({os.path.basename(p).rsplit(".", 2)[0] for p in glob.glob(out + "/*.json")},
               key=lambda n: (n != "mla", n))
for name in names:
    pp, tg, bw = [], [], []
    for r in range(1, rounds + 1):
        bw.append(float(open(f"{out}/{name}.{r}.probe").read()))
        d = json.load(open(f"{out}/{name}.{r}.json"))
        if name == "mla":
            pp.append(d["prefill_tokens_per_s"]); tg.append(d["decode_tokens_per_s"])
            extra = f" (mla: {d['active_weight_bytes_per_token'] / 1e6:.0f} MB/token, " \
                    f"{d['fraction']:.2f} of the read probe)"
        else:
            pp += [x["avg_ts"] for x in d if x["n_prompt"] > 0]
            tg += [x["avg_ts"] for x in d if x["n_gen"] > 0]
    per = statistics.median(t / b for t, b in zip(tg, bw))
    print(f"| {name} | {', '.join(f'{v:.1f}' for v in pp)} | {', '.join(f'{v:.1f}' for v in tg)} "
          f"| {', '.join(f'{v:.1f}' for v in bw)} | {per:.2f} |")
print(extra)
PY
