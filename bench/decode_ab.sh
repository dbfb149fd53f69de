#!/usr/bin/env bash
# Decode speed of two `mla` binaries side by side: runs OLD and NEW interleaved ROUNDS times at 1
# and 2 threads on MODEL and prints the median decode tokens/s of each (docs/BENCHMARKS.md,
# thread pool). Build the old one from a checkout of the earlier commit.
#   bench/decode_ab.sh OLD_MLA NEW_MLA MODEL_DIR   (env: ROUNDS=7, N=128 tokens)
set -euo pipefail
old="$1" new="$2" model="$3"
declare -A runs
for _ in $(seq "${ROUNDS:-7}"); do
  for which in old new; do
    bin=$old
    [[ $which == new ]] && bin=$new
    for t in 1 2; do
      v=$("$bin" generate -m "$model" -p "Hello there" -n "${N:-128}" --ignore-eos --threads "$t" 2>&1 |
        grep -o "decode [0-9.]*" | cut -d' ' -f2)
      runs[$which$t]+="$v "
    done
  done
done
for k in old1 new1 old2 new2; do
  echo "$k median $(tr ' ' '\n' <<<"${runs[$k]}" | grep . | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')  (${runs[$k]})"
done
