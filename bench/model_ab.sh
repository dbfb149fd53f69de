#!/usr/bin/env bash
# Two (or more) `mla` binaries against each other on one model, on a host whose memory bandwidth
# moves: `mla bench model` runs alternate between the binaries, every segment of every run is kept
# (its fraction of the probe beside it), and the segments are pooled per binary and split by that
# probe (docs/BENCHMARKS.md "Model runtime"). Prints the median and quartiles of each pool.
#   bench/model_ab.sh MODEL_DIR MLA_A MLA_B ...   (env: ROUNDS=12, TOKENS=48, SEGMENT=4, FAST=60)
set -euo pipefail
model="$1"
shift
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for _ in $(seq "${ROUNDS:-12}"); do
  for mla in "$@"; do
    "$mla" bench model -m "$model" --tokens "${TOKENS:-48}" --segment "${SEGMENT:-4}" --json \
      2>/dev/null | python3 -c "
import json, sys
for s in json.load(sys.stdin)['segments']:
    print(sys.argv[1], s['fraction'], max(s['probe_gbps_before'], s['probe_gbps_after']),
          s['tokens_per_s'])" "$mla" >>"$log"
  done
done
python3 - "$log" "${FAST:-60}" <<'PY'
import collections, statistics, sys
pools = collections.defaultdict(list)
for line in open(sys.argv[1]):
    b, f, p, t = line.split()
    pools[b].append((float(f), float(p), float(t)))
fast = float(sys.argv[2])
def q(v):
    if not v:
        return '-'
    v = sorted(v)
    n = len(v)
    return f'{statistics.median(v):.3f} [{v[n // 4]:.3f}-{v[3 * n // 4]:.3f}] ({n})'
for b, v in pools.items():
    print(f'{b}: fraction all {q([f for f, _, _ in v])}; probe >= {fast:g} GB/s '
          f'{q([f for f, p, _ in v if p >= fast])}; probe < {fast:g} '
          f'{q([f for f, p, _ in v if p < fast])}; median {statistics.median([t for *_, t in v]):.2f} tok/s')
PY
