# Shared helpers for scripts/run and scripts/test: install what the build needs (idempotently) and
# build a CMake preset. Sourced, not run.
set -euo pipefail

MLA_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MLA_APT_PACKAGES=(cmake g++ ccache libfmt-dev nlohmann-json3-dev libcli11-dev libgtest-dev
                  libbenchmark-dev libpcre2-dev libxxhash-dev pkg-config python3
                  clang-format libcpp-httplib-dev)

# scripts/fuzz only: clang (the `fuzz` preset's compiler, Debian 12's clang 14) and the
# compiler-rt archives that hold libFuzzer and the sanitizer runtimes for that version.
MLA_FUZZ_PACKAGES=(clang libclang-rt-14-dev)

# mla_install_deps [EXTRA_PACKAGE...]: the build's packages plus any extra ones (the tests add
# the browser that loads the chat page).
mla_install_deps() {
  local missing=()
  for p in "${MLA_APT_PACKAGES[@]}" "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    echo "installing: ${missing[*]}"
    local sudo=""
    [[ $(id -u) -ne 0 ]] && sudo="sudo"
    $sudo apt-get update -qq || true
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
  fi
}

# Test oracles from PyPI (pinned; pip keeps its cache). Optional: tests that need them compare
# against committed goldens when they are missing. transformers' DeepSeek classes are the model
# runtime's live reference; the torch wheel pulls the CUDA libraries (~3 GB, once), so when that
# install fails the light packages are still installed on their own.
MLA_PIP_LIGHT=(numpy==2.2.6 tokenizers==0.23.3 openai==3.51.0 gguf==0.19.0 jsonschema==4.26.0
  tiktoken==0.14.0)
MLA_PIP_PACKAGES=("${MLA_PIP_LIGHT[@]}" torch==2.15.0 transformers==5.23.0 safetensors==0.8.0)
mla_install_pip() {
  python3 -c "import numpy, tokenizers, torch, transformers, safetensors, openai, gguf, jsonschema, tiktoken" \
    2>/dev/null && return 0
  python3 -m pip install -q "${MLA_PIP_PACKAGES[@]}" && return 0
  python3 -m pip install -q "${MLA_PIP_LIGHT[@]}" || true
  echo "warning: pip install failed; live oracle checks will be skipped"
}

# mla_build PRESET [TARGET...]: configure (a no-op when nothing changed) and build everything, or
# only the targets named, with 2 jobs; ccache keeps rebuilds fast.
mla_build() {
  local preset="$1"
  shift
  cd "$MLA_ROOT"
  cmake --preset "$preset" >/dev/null
  if (($#)); then
    cmake --build --preset "$preset" --target "$@" -- --no-print-directory
  else
    cmake --build --preset "$preset" -- --no-print-directory
  fi
}
