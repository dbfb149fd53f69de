#!/usr/bin/env bash
# mla against llama.cpp and ik_llama.cpp on the same machine, the same weights and the same number
# of threads: prefill 512 and decode 64 on BF16 weights and on 8-bit weights (mla: block FP8;
# peers: Q8_0), and decode 64 after 4,096 tokens of context on the 8-bit weights. Prints a
# Markdown table of medians over interleaved rounds, with the ratios mla/llama.cpp and
# mla/ik_llama.cpp, and the weight bytes read per decoded token.
#
# Usage:
#   bench/peers.sh LLAMA_CPP_SRC IK_LLAMA_CPP_SRC MODEL_BF16 MODEL_FP8 [MLA_BIN] [WORK_DIR]
# or the same as environment variables (positional arguments win):
#   LLAMA_CPP_SRC     llama.cpp source tree (a git checkout, or vendor/llama.cpp of the
#                     llama-cpp-python sdist: pip download --no-deps --no-binary :all:
#                     llama-cpp-python==X -d DIR)
#   IK_LLAMA_CPP_SRC  ik_llama.cpp source tree (github.com/ikawrakow/ik_llama.cpp)
#   MODEL_BF16        Hugging Face directory (config.json + safetensors), BF16, DeepSeek-V2-Lite
#                     shaped, e.g. `mla make-tiny --family v2-lite --real-dims --bf16 --seed 1
#                     --layers 4 --out DIR`; the peers convert this one (BF16 and Q8_0 GGUF)
#   MODEL_FP8         the same model with block-FP8 weights (make-tiny --fp8): mla's 8-bit row
#   MLA_BIN           the mla CLI (default: build/release/bin/mla of this repository)
#   WORK_DIR          builds, GGUF files, logs and raw results (default: /work/peers/work)
# Other settings (environment):
#   ROUNDS=3          interleaved rounds; each runs every engine once per row group
#   PAIRS=4           back-to-back decode pairs per decode row after the rounds (0: none)
#   THREADS=2 PP=512 TG=64 DEPTH=4096
#   STEPS=all         all | prepare (patch, build, convert; no benchmark) | bench (no build)
#   JOBS=2            parallel build jobs (builds and conversions run under nice -n 19)
#   MLA_ARGS          extra `mla bench model` flags (default none: the engine's defaults, BF16
#                     products and attention); e.g. "--lm-head-dtype int8" for the 8-bit row at
#                     the peers' bytes per token (Q8_0 quantises their lm_head too)
#   MLA_8BIT=fp8      what mla runs in the 8-bit rows: fp8 (MODEL_FP8, its block-FP8
#                     checkpoint), q8_0 (MODEL_FP8 requantised at load, `--weight-dtype q8_0`:
#                     the peers' Q8_0 format and bytes, made from the same FP8 weights) or gguf
#                     (llama.cpp's own Q8_0 file of MODEL_BF16: the same file, bytes and weights
#                     as llama.cpp's rows)
#   IK_CONFIGS        ik_llama.cpp flag sets, ';'-separated; the table takes the best per row
#                     (default "-mla 3 -fa 1 -fmoe 1;-mla 3 -fa 1 -fmoe 1 -rtr 1")
#   LLAMA_ARGS        extra llama-bench flags for llama.cpp (default none: its defaults, which
#                     are flash attention auto and CPU weight repacking on)
#   LLAMA_CMAKE_ARGS, IK_CMAKE_ARGS   extra cmake -D flags
#   PYTHON=python3    the converters run in WORK_DIR/venv (--system-site-packages); missing
#                     packages (sentencepiece, ...) are installed there from PyPI
# Peer versions: `git rev-parse HEAD` of the source tree, else the first line of SRC/COMMIT
# (write it yourself for a tree that is not a git checkout), and llama-bench's build_commit.
#
# What it does:
#  1. patches both peers' sources (idempotent; prints what it changed). The peers load a
#     V2-Lite-shaped checkpoint only at 27 (or 26) layers: they take "lite" (no q_lora, a plain
#     q_proj) from the layer count; the 4-layer test model needs "lite" from q_lora_rank being
#     absent. And the converters reject the tiny tokenizer's unknown pre-tokenizer hash.
#       llama.cpp    src/models/deepseek2.cpp        q_lora_rank key optional: absent => n_lora_q
#                                                    = 0, and the loader then takes wq (lite)
#       llama.cpp    conversion/base.py              unknown pre-tokenizer hash => the name in
#                                                    $PEERS_SH_UNKNOWN_PRE (set: deepseek-v3)
#       ik_llama.cpp src/llama-hparams.cpp           q_lora_rank key optional (as above)
#       ik_llama.cpp src/llama-load-tensors.cpp      is_lite = n_lora_q == 0 || 26/27 layers
#       ik_llama.cpp src/graphs/build_deepseek2.cpp  is_lite = n_lora_q == 0 || 26/27 layers
#       ik_llama.cpp convert_hf_to_gguf.py           as llama.cpp conversion/base.py
#     (exact text and replacements: PATCHES in bench/peers_table.py). A 26/27-layer model with
#     q_lora_rank (none exists) would still be read as lite; nothing else changes.
#  2. builds each peer's llama-bench (cmake Release, GGML_NATIVE=ON, CPU only, no CUDA / Metal /
#     curl / OpenSSL, ccache when present); skipped when WORK_DIR/build/PEER/peers.stamp matches.
#  3. converts MODEL_BF16 with each peer's own convert_hf_to_gguf.py (and its own gguf-py) to
#     BF16 and Q8_0 GGUF (--outtype); skipped when the file exists.
#  4. ROUNDS rounds; each runs, per row group (BF16; 8-bit; 8-bit at DEPTH context), every
#     engine once, in an order rotated per round:
#       mla           mla bench model -m DIR --threads T --prompt-len PP --tokens TG --json
#                     (the prefill row), and the same with --prompt-len 1 (the decode row: from
#                     an empty context, as the peers' tgTG); the depth group: --prompt-len DEPTH
#       llama.cpp     llama-bench -m X.gguf -t T -r 1 -o json -p PP -n TG   (depth: -p 0 -n TG
#                     -d DEPTH)
#       ik_llama.cpp  the same with each IK_CONFIGS flag set (depth: -p 0 -n 0 -gp DEPTH,TG)
#     Each run's weight files are first read into the page cache (cat > /dev/null, untimed),
#     then `mla bench machine` probes the read bandwidth (...json.probe beside the run's JSON):
#     the table also gives decode tokens/s per probe GB/s, which the host's moving bandwidth
#     level does not skew.
#     Raw JSON per run: WORK_DIR/runs/r<round>__<engine>__<config>__<group>.json, logs beside.
#     A failed run is reported and left out (n/a); the others go on.
#     Then PAIRS back-to-back decode pairs per decode row, in ABBA order: mla's decode run
#     (--prefill-warmup 0) and ik_llama.cpp's with its best decode flags of the rounds, one
#     right after the other (WORK_DIR/runs/p<k>__...json; no probes).
#  5. prints the table (bench/peers_table.py table): medians over rounds and their ratios, the
#     median over rounds of the ratio of mla's run to ik_llama.cpp's in the same round, and the
#     median over the back-to-back pairs.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
helper="$here/peers_table.py"

die() {
  echo "peers.sh: error: $*" >&2
  exit 1
}
log() { echo "[peers.sh $(date +%H:%M:%S)] $*" >&2; }

LLAMA_CPP_SRC=${1:-${LLAMA_CPP_SRC:-}}
IK_LLAMA_CPP_SRC=${2:-${IK_LLAMA_CPP_SRC:-}}
MODEL_BF16=${3:-${MODEL_BF16:-}}
MODEL_FP8=${4:-${MODEL_FP8:-}}
MLA_BIN=${5:-${MLA_BIN:-$repo/build/release/bin/mla}}
WORK_DIR=${6:-${WORK_DIR:-/work/peers/work}}
ROUNDS=${ROUNDS:-3}
PAIRS=${PAIRS:-4}
THREADS=${THREADS:-2}
PP=${PP:-512}
TG=${TG:-64}
DEPTH=${DEPTH:-4096}
STEPS=${STEPS:-all}
JOBS=${JOBS:-2}
PYTHON=${PYTHON:-python3}
IK_CONFIGS=${IK_CONFIGS:-"-mla 3 -fa 1 -fmoe 1;-mla 3 -fa 1 -fmoe 1 -rtr 1"}
LLAMA_ARGS=${LLAMA_ARGS:-}
LLAMA_CMAKE_ARGS=${LLAMA_CMAKE_ARGS:-}
IK_CMAKE_ARGS=${IK_CMAKE_ARGS:-}

usage="usage: bench/peers.sh LLAMA_CPP_SRC IK_LLAMA_CPP_SRC MODEL_BF16 MODEL_FP8 [MLA_BIN] [WORK_DIR] (see the header of $0)"
[[ -n $LLAMA_CPP_SRC && -n $IK_LLAMA_CPP_SRC && -n $MODEL_BF16 && -n $MODEL_FP8 ]] || die "$usage"
case $STEPS in all | prepare | bench) ;; *) die "STEPS=$STEPS: want all, prepare or bench" ;; esac
for n in ROUNDS THREADS PP TG DEPTH JOBS; do
  [[ ${!n} =~ ^[1-9][0-9]*$ ]] || die "$n=${!n}: want a positive integer"
done
[[ $PAIRS =~ ^[0-9]+$ ]] || die "PAIRS=$PAIRS: want a count (0: none)"
for d in "$LLAMA_CPP_SRC" "$IK_LLAMA_CPP_SRC"; do
  [[ -f $d/CMakeLists.txt && -f $d/convert_hf_to_gguf.py ]] ||
    die "$d: not a llama.cpp-family source tree (no CMakeLists.txt or convert_hf_to_gguf.py)"
done
[[ -f $LLAMA_CPP_SRC/src/models/deepseek2.cpp ]] ||
  die "$LLAMA_CPP_SRC: no src/models/deepseek2.cpp: is this llama.cpp (and ik_llama.cpp the second argument)?"
[[ -f $IK_LLAMA_CPP_SRC/src/graphs/build_deepseek2.cpp ]] ||
  die "$IK_LLAMA_CPP_SRC: no src/graphs/build_deepseek2.cpp: is this ik_llama.cpp?"
hint="make one with: $MLA_BIN make-tiny --family v2-lite --real-dims --bf16|--fp8 --seed 1 --layers 4 --out DIR"
[[ -f $MODEL_BF16/config.json ]] || die "$MODEL_BF16: no config.json ($hint)"
[[ -f $MODEL_FP8/config.json ]] || die "$MODEL_FP8: no config.json ($hint)"
[[ -x $MLA_BIN ]] || die "$MLA_BIN: not an executable mla binary (build it, or pass MLA_BIN)"
for t in cmake "$PYTHON" nice; do
  command -v "$t" >/dev/null || die "$t not found"
done
LLAMA_CPP_SRC=$(cd "$LLAMA_CPP_SRC" && pwd)
IK_LLAMA_CPP_SRC=$(cd "$IK_LLAMA_CPP_SRC" && pwd)
MODEL_BF16=$(cd "$MODEL_BF16" && pwd)
MODEL_FP8=$(cd "$MODEL_FP8" && pwd)
mkdir -p "$WORK_DIR"/{build,gguf,runs,logs}
WORK_DIR=$(cd "$WORK_DIR" && pwd)

desc_bf16=$("$PYTHON" "$helper" check-model "$MODEL_BF16" bf16) || die "MODEL_BF16: see above"
desc_fp8=$("$PYTHON" "$helper" check-model "$MODEL_FP8" fp8) || die "MODEL_FP8: see above"
log "BF16 model $MODEL_BF16: $desc_bf16"
log "FP8 model  $MODEL_FP8: $desc_fp8"

MLA_ARGS=${MLA_ARGS:-}

src_of() { if [[ $1 == llama.cpp ]]; then echo "$LLAMA_CPP_SRC"; else echo "$IK_LLAMA_CPP_SRC"; fi; }
bench_of() { echo "$WORK_DIR/build/$1/bin/llama-bench"; }
version_of() {
  local src
  src=$(src_of "$1")
  if git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1 &&
    [[ $(git -C "$src" rev-parse --show-toplevel) == "$src" ]]; then
    git -C "$src" rev-parse HEAD
  elif [[ -f $src/COMMIT ]]; then
    head -n1 "$src/COMMIT"
  else
    echo "unknown"
  fi
}

# ---- 1. patches --------------------------------------------------------------------------------
patch_log="$WORK_DIR/logs/patches.txt"
# (also for STEPS=bench: idempotent, and the table lists the patches)
log "patching the peers' sources (see the header of bench/peers.sh):"
{
  "$PYTHON" "$helper" patch llama.cpp "$LLAMA_CPP_SRC"
  "$PYTHON" "$helper" patch ik_llama.cpp "$IK_LLAMA_CPP_SRC"
} | tee "$patch_log" >&2

# ---- 2. builds ----------------------------------------------------------------------------------
build_peer() {
  local peer=$1 src bdir stamp want targets extra
  src=$(src_of "$peer")
  bdir="$WORK_DIR/build/$peer"
  stamp="$bdir/peers.stamp"
  if [[ $peer == llama.cpp ]]; then extra=$LLAMA_CMAKE_ARGS; else extra=$IK_CMAKE_ARGS; fi
  local -a args=(-DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DGGML_CUDA=OFF -DGGML_METAL=OFF
    -DGGML_VULKAN=OFF -DGGML_HIP=OFF -DGGML_SYCL=OFF -DGGML_BLAS=OFF -DLLAMA_CURL=OFF
    -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TESTS=OFF -DBUILD_SHARED_LIBS=OFF)
  if command -v ccache >/dev/null; then
    args+=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  fi
  # shellcheck disable=SC2206 # word splitting of the user's extra flags is wanted
  args+=($extra)
  want="${args[*]} | $(version_of "$peer") | $({ grep -rl 'peers\.sh' "$src/src" || true; } | sort | xargs -r cat | cksum)"
  if [[ -x $(bench_of "$peer") && -f $stamp && $(cat "$stamp") == "$want" ]]; then
    log "$peer: llama-bench already built ($(bench_of "$peer"))"
    return
  fi
  targets=(--target llama-bench)
  log "$peer: building llama-bench in $bdir (nice -n 19, -j$JOBS; log $WORK_DIR/logs/build-$peer.log)"
  if ! { nice -n 19 cmake -S "$src" -B "$bdir" "${args[@]}" &&
    nice -n 19 cmake --build "$bdir" --config Release -j"$JOBS" "${targets[@]}"; } \
    >"$WORK_DIR/logs/build-$peer.log" 2>&1; then
    tail -n 30 "$WORK_DIR/logs/build-$peer.log" >&2
    die "$peer: build failed (log: $WORK_DIR/logs/build-$peer.log)"
  fi
  [[ -x $(bench_of "$peer") ]] || die "$peer: built, but no $(bench_of "$peer")"
  echo "$want" >"$stamp"
  log "$peer: built $(bench_of "$peer")"
}

# ---- 3. Python environment and GGUF conversion ----------------------------------------------
venv="$WORK_DIR/venv"
py="$venv/bin/python"
setup_python() {
  if [[ ! -x $py ]]; then
    log "creating $venv (--system-site-packages: reuses an installed torch)"
    "$PYTHON" -m venv --system-site-packages "$venv" || die "$PYTHON -m venv failed"
  fi
  local -a missing=()
  local mod pkg
  for pair in numpy:numpy torch:torch transformers:transformers sentencepiece:sentencepiece \
    google.protobuf:protobuf yaml:pyyaml tqdm:tqdm safetensors:safetensors requests:requests; do
    mod=${pair%%:*}
    pkg=${pair#*:}
    "$py" -c "import $mod" >/dev/null 2>&1 || missing+=("$pkg")
  done
  if ((${#missing[@]})); then
    log "pip install into $venv: ${missing[*]}"
    "$py" -m pip install --quiet "${missing[@]}" || die "pip install ${missing[*]} failed"
  fi
}

gguf_of() { echo "$WORK_DIR/gguf/$1-$2.gguf"; }
convert_peer() {
  local peer=$1 type=$2 src out
  src=$(src_of "$peer")
  out=$(gguf_of "$peer" "$type")
  if [[ -s $out ]]; then
    log "$peer: $out already converted"
    return
  fi
  log "$peer: converting $MODEL_BF16 to $type GGUF with its convert_hf_to_gguf.py (log $WORK_DIR/logs/convert-$peer-$type.log)"
  if ! PEERS_SH_UNKNOWN_PRE=deepseek-v3 nice -n 19 "$py" "$src/convert_hf_to_gguf.py" \
    "$MODEL_BF16" --outtype "$type" --outfile "$out.tmp" \
    >"$WORK_DIR/logs/convert-$peer-$type.log" 2>&1; then
    tail -n 30 "$WORK_DIR/logs/convert-$peer-$type.log" >&2
    rm -f "$out.tmp"
    die "$peer: convert_hf_to_gguf.py --outtype $type failed (log: $WORK_DIR/logs/convert-$peer-$type.log)"
  fi
  mv "$out.tmp" "$out"
}

if [[ $STEPS != bench ]]; then
  build_peer llama.cpp
  build_peer ik_llama.cpp
  setup_python
  for peer in llama.cpp ik_llama.cpp; do
    for type in bf16 q8_0; do convert_peer "$peer" "$type"; done
  done
fi
[[ $STEPS == prepare ]] && {
  log "prepared (STEPS=prepare): no benchmark"
  exit 0
}
for peer in llama.cpp ik_llama.cpp; do
  [[ -x $(bench_of "$peer") ]] || die "$peer: no $(bench_of "$peer") (run with STEPS=all or prepare)"
  for type in bf16 q8_0; do
    [[ -s $(gguf_of "$peer" "$type") ]] || die "$peer: no $(gguf_of "$peer" "$type") (run with STEPS=all or prepare)"
  done
done
[[ -x $py ]] || setup_python

# ---- 4. interleaved rounds ----------------------------------------------------------------------
runs="$WORK_DIR/runs"
rm -f "$runs"/*.json "$runs"/*.log
IFS=';' read -r -a ik_sets <<<"$IK_CONFIGS"
cfg_name() { # "-mla 3 -fa 1 -fmoe 1" -> mla3_fa1_fmoe1 (a file name part)
  local s
  s=$(echo "$1" | sed -E 's/^ *-+//; s/ +-+/_/g; s/ +//g; s/[^A-Za-z0-9.,=-]/_/g; s/_+/_/g')
  echo "${s:-default}"
}
PEERS_CFG_NAMES="{"
for s in "${ik_sets[@]}"; do PEERS_CFG_NAMES+="\"$(echo "$s" | sed -E 's/^ +| +$//g')\": \"$(cfg_name "$s")\", "; done
export PEERS_CFG_NAMES="${PEERS_CFG_NAMES%, }}"

# run_one RUN ENGINE CONFIG GROUP -- COMMAND...: the JSON on stdout goes to the runs dir. RUN:
# r<round> (a round's run, after a read probe) or p<k> (a back-to-back decode pair's, none).
failures=0
run_one() {
  local round=$1 engine=$2 config=$3 group=$4
  shift 5
  local base="$runs/${round}__${engine}__${config}__${group}"
  # The host's read bandwidth moves between levels from minute to minute (docs/BENCHMARKS.md):
  # a read probe right before each run lets the table compare decode per probe GB/s.
  if [[ $round == r* ]]; then
    "$MLA_BIN" bench machine --json 2>/dev/null |
      "$PYTHON" -c 'import json, sys; print(json.load(sys.stdin)["mem_bw_gbps"])' \
        >"$base.probe" 2>/dev/null || rm -f "$base.probe"
  fi
  local t0=$SECONDS
  if "$@" >"$base.json.tmp" 2>"$base.log"; then
    mv "$base.json.tmp" "$base.json"
    log "$round: $engine [$config] $group: $((SECONDS - t0)) s"
  else
    local rc=$?
    failures=$((failures + 1))
    mv "$base.json.tmp" "$base.failed.out"
    log "$round: $engine [$config] $group FAILED (exit $rc; $base.log):"
    tail -n 8 "$base.log" | sed 's/^/    /' >&2
  fi
}

# The 21 GB of weight files (HF BF16 + FP8, 4 GGUF) barely fit the page cache of a 24 GB host:
# every engine maps its weights, so one evicted by the runs before would be faulted in from the
# disk inside the timed part. Read them into the page cache first (untimed).
warm_page_cache() {
  if [[ -d $1 ]]; then
    cat "$1"/*.safetensors >/dev/null
  else
    cat "$1" >/dev/null
  fi
}

mla_cmd() { # MODEL PROMPT_LEN [FLAGS] (MLA_ARGS and FLAGS split into words on purpose)
  # shellcheck disable=SC2086
  echo "$MLA_BIN" bench model -m "$1" --threads "$THREADS" --prompt-len "$2" --tokens "$TG" \
    $MLA_ARGS ${3:-} --json
}

# The jobs of one group, one line each: ENGINE|CONFIG|WEIGHTS|command words (no '|' in any);
# WEIGHTS (a file, or a directory of *.safetensors) is read into the page cache before the run.
group_jobs() {
  local group=$1 model ggtype s flags=
  case $group in
    bf16) ggtype=bf16 ;;
    *) ggtype=q8_0 ;;
  esac
  if [[ $group == bf16 ]]; then
    model=$MODEL_BF16
  elif [[ ${MLA_8BIT:-fp8} == gguf ]]; then
    model=$(gguf_of llama.cpp q8_0)
  else
    model=$MODEL_FP8
    [[ ${MLA_8BIT:-fp8} == q8_0 ]] && flags="--weight-dtype q8_0"
  fi
  if [[ $group == depth ]]; then
    echo "mla|default|$model|$(mla_cmd "$model" "$DEPTH" "$flags")"
    echo "llama.cpp|default|$(gguf_of llama.cpp q8_0)|$(bench_of llama.cpp) -m $(gguf_of llama.cpp q8_0) -t $THREADS -r 1 -o json -p 0 -n $TG -d $DEPTH $LLAMA_ARGS"
    for s in "${ik_sets[@]}"; do
      echo "ik_llama.cpp|$(cfg_name "$s")|$(gguf_of ik_llama.cpp q8_0)|$(bench_of ik_llama.cpp) -m $(gguf_of ik_llama.cpp q8_0) -t $THREADS -r 1 -o json -p 0 -n 0 -gp $DEPTH,$TG $s"
    done
  else
    echo "mla|default|$model|$(mla_cmd "$model" "$PP" "$flags")"
    echo "mla|empty|$model|$(mla_cmd "$model" 1 "$flags")"
    echo "llama.cpp|default|$(gguf_of llama.cpp "$ggtype")|$(bench_of llama.cpp) -m $(gguf_of llama.cpp "$ggtype") -t $THREADS -r 1 -o json -p $PP -n $TG $LLAMA_ARGS"
    for s in "${ik_sets[@]}"; do
      echo "ik_llama.cpp|$(cfg_name "$s")|$(gguf_of ik_llama.cpp "$ggtype")|$(bench_of ik_llama.cpp) -m $(gguf_of ik_llama.cpp "$ggtype") -t $THREADS -r 1 -o json -p $PP -n $TG $s"
    done
  fi
}

for peer in llama.cpp ik_llama.cpp; do
  [[ $(version_of "$peer") != unknown ]] || log "warning: $peer version unknown (no git checkout, no $(src_of "$peer")/COMMIT)"
done
log "benchmark: $ROUNDS rounds, $THREADS threads, prefill $PP, decode $TG, depth $DEPTH; mla ${MLA_ARGS:-(defaults)}, 8-bit rows ${MLA_8BIT:-fp8}"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
bench_t0=$SECONDS
for ((r = 1; r <= ROUNDS; r++)); do
  for group in bf16 q8 depth; do
    mapfile -t group_list < <(group_jobs "$group")
    n=${#group_list[@]}
    for ((i = 0; i < n; i++)); do
      job=${group_list[$(((i + r - 1) % n))]} # rotate the order per round
      IFS='|' read -r engine config weights cmd <<<"$job"
      read -r -a words <<<"$cmd"
      warm_page_cache "$weights"
      run_one "r$r" "$engine" "$config" "$group" -- "${words[@]}"
    done
  done
done

# Back-to-back decode pairs: mla's decode run (the empty-context one; depth: its only one) and
# ik_llama.cpp's with its best decode flags of the rounds, one right after the other, the order
# alternating (ABBA): the host's read bandwidth moves within seconds (docs/BENCHMARKS.md), so
# the rounds' decode ratios, minutes apart, move with it.
for group in bf16 q8 depth; do
  ((PAIRS > 0)) || break
  best_cfg=$("$PYTHON" "$helper" best-config "$runs" "$group")
  [[ -n $best_cfg ]] || {
    log "pairs $group: no ik_llama.cpp decode in the rounds; skipped"
    continue
  }
  mapfile -t group_list < <(group_jobs "$group")
  mla_job= ik_job=
  for job in "${group_list[@]}"; do
    IFS='|' read -r engine config _ _ <<<"$job"
    [[ $engine == mla && ($config == empty || ($group == depth && $config == default)) ]] && mla_job=$job
    [[ $engine == ik_llama.cpp && $config == "$best_cfg" ]] && ik_job=$job
  done
  for ((k = 1; k <= PAIRS; k++)); do
    if ((k % 2)); then order=("$mla_job" "$ik_job"); else order=("$ik_job" "$mla_job"); fi
    for job in "${order[@]}"; do
      IFS='|' read -r engine config weights cmd <<<"$job"
      read -r -a words <<<"$cmd"
      # mla's untimed prefill warm-up is no use to a decode figure
      [[ $engine == mla ]] && words+=(--prefill-warmup 0)
      warm_page_cache "$weights"
      run_one "p$k" "$engine" "$config" "$group" -- "${words[@]}"
    done
  done
done
bench_s=$((SECONDS - bench_t0))
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- 5. table -----------------------------------------------------------------------------------
bytes_json="{"
for peer in llama.cpp ik_llama.cpp; do
  for g in bf16 q8; do
    if [[ $g == bf16 ]]; then type=bf16; else type=q8_0; fi
    b=$("$py" "$helper" gguf-bytes "$(src_of "$peer")/gguf-py" "$(gguf_of "$peer" "$type")" 2>/dev/null) || b=0
    bytes_json+="\"$peer/$g\": ${b:-0}, "
  done
done
export PEERS_BYTES="${bytes_json%, }}"
export PEERS_IK_SETS="$IK_CONFIGS" PEERS_LLAMA_ARGS="$LLAMA_ARGS" PEERS_MLA_ARGS="$MLA_ARGS"
export PEERS_MLA_8BIT=${MLA_8BIT:-fp8}
export PEERS_THREADS=$THREADS PEERS_PP=$PP PEERS_TG=$TG PEERS_DEPTH=$DEPTH PEERS_ROUNDS=$ROUNDS
export PEERS_PAIRS=$PAIRS
export PEERS_LOAD="$load_before -> $load_after"
export PEERS_WALL=$bench_s PEERS_FAILURES=$failures PEERS_MLA_BIN=$MLA_BIN
PEERS_CPU=$(lscpu 2>/dev/null | sed -n 's/^Model name:[[:space:]]*//p' | head -n1) || PEERS_CPU="?"
PEERS_MODEL="$MODEL_BF16 / $MODEL_FP8 ($desc_bf16)"
PEERS_LLAMA_VERSION=$(version_of llama.cpp)
PEERS_IK_VERSION=$(version_of ik_llama.cpp)
export PEERS_CPU PEERS_MODEL PEERS_LLAMA_VERSION PEERS_IK_VERSION
meta="$runs/meta.json"
"$PYTHON" - "$meta" <<'PY'
import json, os, sys
e = os.environ
sets = [s.strip() for s in e["PEERS_IK_SETS"].split(";") if s.strip()]
pp, tg, depth, t = e["PEERS_PP"], e["PEERS_TG"], e["PEERS_DEPTH"], e["PEERS_THREADS"]
largs = (" " + e["PEERS_LLAMA_ARGS"]) if e["PEERS_LLAMA_ARGS"] else ""
names = json.loads(e["PEERS_CFG_NAMES"])
wall = int(e["PEERS_WALL"])
notes = [
    f"mla: `mla bench model --threads {t} --prompt-len {pp} --tokens {tg} "
    f"{e['PEERS_MLA_ARGS'] + ' ' if e['PEERS_MLA_ARGS'] else ''}--json` on the BF16 checkpoint and "
    + {"gguf": "llama.cpp's Q8_0 GGUF file",
       "q8_0": "the FP8 checkpoint with `--weight-dtype q8_0` (requantised at load)"}.get(
           e["PEERS_MLA_8BIT"], "the FP8 checkpoint")
    + f"; the decode rows from a second run with --prompt-len 1 (context 1..{int(tg) + 1}; the "
    f"peers' tg{tg}: 0..{tg}); depth row: --prompt-len {depth}.",
    f"llama.cpp {e['PEERS_LLAMA_VERSION']}: `llama-bench -t {t} -r 1 -o json -p {pp} -n {tg}{largs}`"
    f" (depth row: `-p 0 -n {tg} -d {depth}`) on BF16 and Q8_0 GGUF from its own "
    "convert_hf_to_gguf.py.",
    f"ik_llama.cpp {e['PEERS_IK_VERSION']}: `llama-bench -t {t} -r 1 -o json -p {pp} -n {tg} FLAGS`"
    f" (depth row: `-p 0 -n 0 -gp {depth},{tg} FLAGS`), GGUF from its own converter; FLAGS: "
    + "; ".join(f"`{s}`" for s in sets) + " (the best per row is shown).",
    "Both peers patched to load a 4-layer V2-Lite-shaped model (lite from q_lora_rank absent, "
    "not from 27 layers) and to convert its tiny tokenizer (pre-tokenizer deepseek-v3): see "
    "bench/peers.sh.",
    f"Interleaved rounds: {e['PEERS_ROUNDS']}; back-to-back decode pairs per decode row: "
    f"{e['PEERS_PAIRS']}; benchmark wall time {wall // 60} min {wall % 60} s; "
    f"failed runs: {e['PEERS_FAILURES']}; load average (1, 5, 15 min) before -> after: "
    f"{e['PEERS_LOAD']} (the host's 2 cores are shared).",
]
configs = {"mla/default": e["PEERS_MLA_ARGS"] or "defaults",
           "mla/empty": ((e["PEERS_MLA_ARGS"] + " ") if e["PEERS_MLA_ARGS"] else "") + "--prompt-len 1",
           "llama.cpp/default": "defaults" + largs}
configs.update({f"ik_llama.cpp/{names[s]}": s for s in sets})
json.dump({"mla_8bit": e["PEERS_MLA_8BIT"], "threads": int(t), "pp": int(pp), "tg": int(tg), "depth": int(depth),
           "cpu": e["PEERS_CPU"], "model": e["PEERS_MODEL"], "bytes": json.loads(e["PEERS_BYTES"]),
           "configs": configs, "ik_configs": {names[s]: s for s in sets}, "notes": notes},
          open(sys.argv[1], "w"), indent=1)
PY
echo
"$PYTHON" "$helper" table "$runs" "$meta"
if [[ -f $patch_log ]]; then
  echo
  echo "Patches applied to the peers' sources:"
  sed 's/^ */- /' "$patch_log"
fi
