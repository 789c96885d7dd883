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
          libgtest-dev libgmock-dev librapidcheck-dev libbenchmark-dev clang-14 libclang-rt-14-dev
          python3-dev python3-pip libopenmpi-dev openmpi-bin mesa-vulkan-drivers)

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

# The Python package's build and test needs (PyPI), installed only when missing: nanobind builds
# optjit._optjit; torch, numpy and pytest test optjit.torch against PyTorch itself; scikit-learn
# has the digits data set the training test uses; prodigyopt and schedulefree are the oracles of
# the Prodigy and Schedule-Free examples written in the text form; bitsandbytes and torchao are
# the oracles of 8-bit state; transformers (with accelerate) is the Trainer that the install()
# lines are tested under (python/tests/test_trainer.py); jax, for JAX arrays over DLPack
# (refused as parameters, read as gradients); wgpu carries wgpu-native (the webgpu backend's
# library and headers; Mesa's lavapipe is its device here).
PY_PACKAGES=(nanobind numpy pytest torch expecttest scikit-learn lion-pytorch torch-optimizer
             prodigyopt schedulefree bitsandbytes torchao transformers accelerate jax wgpu)
PY_MODULES=(nanobind numpy pytest torch expecttest sklearn lion_pytorch torch_optimizer
            prodigyopt schedulefree bitsandbytes torchao transformers accelerate jax wgpu)

install_python_deps() {
  local missing=()
  for i in "${!PY_MODULES[@]}"; do
    python3 -c "import ${PY_MODULES[$i]}" 2>/dev/null || missing+=("${PY_PACKAGES[$i]}")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "dev.sh: installing ${missing[*]} (pip)"
  local pip=(python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore)
  # A distribution's own Python refuses system-wide installs (PEP 668); this machine is ours.
  "${pip[@]}" "${missing[@]}" 2>/dev/null || "${pip[@]}" --break-system-packages "${missing[@]}"
}

build() {
  install_deps
  install_python_deps
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DOPTJIT_BUILD_PYTHON=ON \
    -DPython_EXECUTABLE="$(command -v python3)" > /dev/null
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
  # PoCL (the OpenCL device here) builds a kernel's work-group function once for any local size
  # and by continuations, instead of once per local size with loop vectorisation: the same
  # results (every OpenCL test passes either way) from about half the kernel compile time, which
  # is most of an OpenCL test's (Quant.OpenclStepsTheSameBitsAsTheCpu, cold: 160 s -> 86 s). A
  # caller's own settings win.
  export POCL_WORK_GROUP_METHOD=${POCL_WORK_GROUP_METHOD:-cbs}
  export POCL_WORK_GROUP_SPECIALIZATION=${POCL_WORK_GROUP_SPECIALIZATION:-0}
  ctest --test-dir "$BUILD" --output-on-failure -j2 -L nodevice
}

case "${1:-}" in
  demo) demo ;;
  test) tests ;;
  build) build ;;
  *) echo "usage: $0 demo|test|build" >&2; exit 2 ;;
esac
