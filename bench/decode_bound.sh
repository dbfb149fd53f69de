#!/usr/bin/env bash
# Decode tokens/s of one model against the weight-bandwidth bound (docs/BENCHMARKS.md "Model
# runtime"), on a host whose memory bandwidth moves with its other tenants: each round runs the
# read probe (`mla bench machine`, all threads), one `mla generate`, and the probe again, and
# states the decode's effective read rate (tokens/s · active_weight_bytes_per_token) as a fraction
# of the higher of the two probes around it. Prints every round and the medians.
#   bench/decode_bound.sh MLA MODEL_DIR   (env: ROUNDS=5, N=64 generated tokens, PROMPT=16 ids)
# `mla bench model -m DIR` pairs the probe with every few decode steps instead of a whole run (the
# host changed speed within a run); this script stays for the figures that were taken with it.
set -euo pipefail
mla="$1" model="$2"
toks=$(seq -s, 1 "${PROMPT:-16}")
probe() { "$mla" bench machine --json 2>/dev/null | python3 -c \
  "import json,sys; print(json.load(sys.stdin)['mem_bw_gbps'])"; }
rows=()
before=$(probe)
for round in $(seq "${ROUNDS:-5}"); do
  out=$("$mla" generate -m "$model" --tokens "$toks" -n "${N:-64}" --ignore-eos --json 2>/dev/null)
  after=$(probe)
  row=$(python3 -c "
import json, sys
d = json.loads(sys.argv[1]); b, a = float(sys.argv[2]), float(sys.argv[3])
tps = d['decode_tokens_per_s']; eff = tps * d['active_weight_bytes_per_token'] * 1e-9
print(f'{tps:.2f} {eff:.1f} {max(a, b):.1f} {eff / max(a, b):.3f}')" "$out" "$before" "$after")
  echo "round $round: decode tok/s, effective GB/s, probe GB/s (higher of before/after), fraction: $row"
  rows+=("$row")
  before=$after
done
printf '%s\n' "${rows[@]}" | python3 -c "
import statistics, sys
r = [list(map(float, l.split())) for l in sys.stdin if l.strip()]
m = [statistics.median(c) for c in zip(*r)]
print(f'median: {m[0]:.2f} tok/s, {m[1]:.1f} GB/s effective, probe {m[2]:.1f} GB/s, fraction {m[3]:.3f}')"
