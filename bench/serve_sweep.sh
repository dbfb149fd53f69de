#!/usr/bin/env bash
# Serving benchmark sweep: starts `mla serve` on a free loopback port with MODEL (and any extra
# server flags), runs `mla bench serve` at each concurrency of CONCURRENCY (all requests sent at
# once, at most C in flight), and prints one markdown row per run for docs/BENCHMARKS.md.
#   bench/serve_sweep.sh MODEL_DIR [SERVER_FLAG...]
#   env: CONCURRENCY="1 2 4 8" NUM_PROMPTS=32 INPUT_LEN=128 OUTPUT_LEN=64 MLA=build/release/bin/mla
set -euo pipefail
MODEL="$1"
shift
MLA="${MLA:-$(dirname "$0")/../build/release/bin/mla}"
LOG="$(mktemp)"
"$MLA" serve -m "$MODEL" --port 0 "$@" 2>"$LOG" &
SERVER=$!
trap 'kill -TERM $SERVER 2>/dev/null || true; wait $SERVER 2>/dev/null || true; rm -f "$LOG"' EXIT
for _ in $(seq 1200); do
  grep -q '^ready' "$LOG" && break
  kill -0 $SERVER 2>/dev/null || { cat "$LOG"; exit 1; }
  sleep 0.1
done
URL="$(sed -n 's/^listening on \(http:[^ ]*\).*/\1/p' "$LOG")"
echo "| C | req/s | out tok/s | TTFT mean / p50 / p99 ms | TPOT mean / p50 / p99 ms | ITL p50 / p99 ms | E2E p50 ms |"
echo "|---|---|---|---|---|---|---|"
for c in ${CONCURRENCY:-1 2 4 8}; do
  "$MLA" bench serve --base-url "$URL" --num-prompts "${NUM_PROMPTS:-32}" --request-rate inf \
    --max-concurrency "$c" --input-len "${INPUT_LEN:-128}" --output-len "${OUTPUT_LEN:-64}" \
    --json 2>/dev/null |
    python3 -c '
import json, sys
r = json.load(sys.stdin)
assert r["failed"] == 0, r["first_error"]
f = lambda *ks: " / ".join("%.2f" % r[k] for k in ks)
print("| %d | %.2f | %.1f | %s | %s | %s | %s |" % (
    r["max_concurrency"], r["request_throughput"], r["output_throughput"],
    f("mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms"),
    f("mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms"),
    f("median_itl_ms", "p99_itl_ms"), f("median_e2el_ms")))'
done
