#!/usr/bin/env bash
# optjit's one entry point on a fresh Debian 12 machine:
#   ./dev.sh demo    install what is missing, build, run the main job
#   ./dev.sh test    install what is missing, build, run the whole test suite
#   ./dev.sh build   install what is missing and build
set -euo pipefail
cd "$(dirname "$0")"
BUILD=${OPTJIT_BUILD_DIR:-build}

# Every Debian package the project needs; installed only when missing.
PACKAGES=(cmake ninja-build g++ pkg-config git
          llvm-15-dev ocl-icd-opencl-dev opencl-headers pocl-opencl-icd clinfo
          libsqlite3-dev libfmt-dev libcli11-dev nlohmann-json3-dev libxxhash-dev libsodium-dev
          libgtest-dev libgmock-dev librapidcheck-dev libbenchmark-dev clang-14 libclang-rt-14-dev)

install_deps() {
  local missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "dev.sh: installing ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" > /dev/null
}

build() {
  install_deps
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null
  cmake --build "$BUILD" -j2
}

demo() {
  build
  local out="$BUILD/demo" cli="$BUILD/optjit"
  mkdir -p "$out"
  echo; echo "== 1. a generated GPT-2-shaped parameter set (4 layers, width 256) with 20 steps of gradients"
  "$cli" synth --preset tiny-gpt --steps 20 --seed 1 --params "$out/params.safetensors" --grads "$out/grads.safetensors"
  echo; echo "== 2. the pipeline"
  grep -v '^#' examples/pipelines/gpt_adamw.opt
  echo; echo "== 3. its plan: passes over memory and bytes per parameter (PyTorch moves 40 B for this)"
  "$cli" plan examples/pipelines/gpt_adamw.opt --no-bodies | sed -n '/^plan:/,$p'
  echo; echo "== 4. 20 steps on the CPU backend (LLVM JIT); biases and LayerNorm weights without weight decay"
  "$cli" run examples/pipelines/gpt_adamw.opt --params "$out/params.safetensors" --grads "$out/grads.safetensors" \
    --steps 20 --group '*.bias,*ln_*:weight_decay=0' --out "$out/trained.safetensors"
  echo; echo "== 5. the result (parameters and AdamW state for the first block)"
  "$cli" inspect "$out/trained.safetensors" --match 'h.0.attn.c_attn*'
  "$cli" inspect "$out/trained.safetensors" --match 'step' | tail -n +2
}

tests() {
  build
  ctest --test-dir "$BUILD" --output-on-failure -j2 -L nodevice
}

case "${1:-}" in
  demo) demo ;;
  test) tests ;;
  build) build ;;
  *) echo "usage: $0 demo|test|build" >&2; exit 2 ;;
esac
