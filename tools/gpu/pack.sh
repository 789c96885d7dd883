#!/usr/bin/env bash
# Packs the built optjit (CLI, library, CUDA and WebGPU tests, fmt's headers) with the shared
# libraries it needs that a GPU machine's image lacks (LLVM 15, SQLite, fmt, libsodium, xxHash,
# OpenCL's loader, wgpu-native, ...) into .gpu/optjit-gpu.tar.xz (about 52 MB), and Debian's GL
# loaders into .gpu/gl, for machines that can run CUDA but cannot install Debian's packages.
# A baseline of another revision built by tools/gpu/baseline.sh goes in too (under 1 MB), for
# device_run.sh's same-lease comparisons.
# Then, on such a machine, with .gpu carried along:
#   bash tools/gpu/lease.sh smoke:110 tests:160 python:170 webgpu:90   # stages, time limits, logs
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
[ -x "$build/optjit" ] && [ -x "$build/tests/cuda_test" ] || {
  echo "build first: ./dev.sh build" >&2
  exit 1
}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" .gpu
cp "$build/optjit" "$build/tests/cuda_test" "$stage/bin/"
# The WebGPU backend's parity tests, for NVIDIA's Vulkan driver (device_run.sh's webgpu stage).
[ -x "$build/tests/webgpu_test" ] && cp "$build/tests/webgpu_test" "$stage/bin/"
# CUDA's launch-shape property (device_run.sh's tests stage; built where rapidcheck is).
[ -x "$build/tests/cuda_property_test" ] && cp "$build/tests/cuda_property_test" "$stage/bin/"
# Everything the binaries load except the C runtime, libstdc++ (the GPU image's is newer) and
# NVRTC (which must match the machine's CUDA).
ldd "$stage"/bin/* | awk '/=>/ {print $3}' | sort -u |
  grep -Ev '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*|libstdc\+\+|libgcc_s|libnvrtc[^/]*)\.so' |
  while read -r lib; do cp -L "$lib" "$stage/lib/"; done
# NCCL (loaded at run time by api/nccl_communicator.cpp) is not packed: the GPU image has its
# Python wheel (nvidia-nccl-cu13), which device_run.sh finds, and the toolkit's copy (190 MB)
# would put the bundle past what the device tool carries (64 MiB).
# fmt's headers, which optjit's own include: device_run.sh's `python` stage builds the Python
# module there (python/CMakeLists.txt alone) against the bundle's liboptjit.
mkdir -p "$stage/include"
cp -r /usr/include/fmt "$stage/include/"
# WebGPU (#15's comparison on an NVIDIA GPU): wgpu-native from the wgpu package and the Vulkan
# loader; NVIDIA's Vulkan driver itself is the machine's (device_run.sh's webgpu stage says
# when it has none).
wgpu=$(python3 -c 'import os, wgpu; print(os.path.join(os.path.dirname(wgpu.__file__), "resources"))' \
  2>/dev/null) || true
[ -n "$wgpu" ] && cp -L "$wgpu"/libwgpu_native*.so "$stage/lib/" 2>/dev/null || true
# (awk reads all of ldconfig's list: one that exits at the first match can end ldconfig with
# SIGPIPE, which pipefail and set -e turned into pack failing with status 141, now and then.)
vulkan=$(ldconfig -p | awk '/libvulkan.so.1 / && !found {print $NF; found = 1}')
[ -n "$vulkan" ] && cp -L "$vulkan" "$stage/lib/libvulkan.so.1"
# bitsandbytes, the peer of #12's 8-bit state, is not in the GPU image: its package with only
# the CUDA 13 libraries (4 MB of its 125), put on PYTHONPATH by device_run.sh's python stage.
bnb=$(python3 -c 'import os, bitsandbytes as b; print(os.path.dirname(b.__file__))' 2>/dev/null |
  tail -1) || true
if [ -n "$bnb" ] && [ -d "$bnb" ]; then
  mkdir -p "$stage/pylib"
  cp -r "$bnb" "$stage/pylib/"
  find "$stage/pylib" -name __pycache__ -prune -exec rm -rf {} +
  find "$stage/pylib/bitsandbytes" -name 'libbitsandbytes_*.so' ! -name '*_cpu.so' \
    ! -name '*_cuda13*.so' -delete
  cp -r "$(dirname "$bnb")"/bitsandbytes-*.dist-info "$stage/pylib/" 2>/dev/null || true
fi
# A baseline build of another revision (tools/gpu/baseline.sh), for device_run.sh's same-lease
# comparisons: its CLI and library only (the other libraries are the same packages').
base=${OPTJIT_BASELINE_BUILD:-/tmp/optjit-baseline/build}
if [ -x "$base/optjit" ] && [ -e "$base/liboptjit.so.0.1" ]; then
  mkdir -p "$stage/baseline/bin" "$stage/baseline/lib"
  cp "$base/optjit" "$stage/baseline/bin/"
  cp -L "$base/liboptjit.so.0.1" "$stage/baseline/lib/"
  cp "$base/REVISION" "$stage/baseline/" 2>/dev/null || echo unknown >"$stage/baseline/REVISION"
  strip "$stage"/baseline/bin/* "$stage"/baseline/lib/* 2>/dev/null || true
  echo "pack: with the baseline $(cut -c1-12 "$stage/baseline/REVISION")"
fi
strip "$stage"/bin/* "$stage"/lib/* 2>/dev/null || true
tar -cJf .gpu/optjit-gpu.tar.xz -C "$stage" .
size=$(stat -c %s .gpu/optjit-gpu.tar.xz)
if [ "$size" -gt $((60 << 20)) ]; then
  echo "pack: the bundle is $((size >> 20)) MiB; the device tool carries at most 64 MiB" >&2
  exit 1
fi
# The GL and Vulkan loaders NVIDIA's Vulkan driver needs and the GPU image lacks (without them
# wgpu-native finds no NVIDIA adapter): Debian's packages, unpacked there by device_run.sh.
if [ ! -d .gpu/gl ] && command -v apt-get >/dev/null; then
  mkdir -p .gpu/gl
  (cd .gpu/gl && apt-get download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 \
    libgles2 >/dev/null 2>&1) || echo "pack: could not download the GL loaders (webgpu on NVIDIA)" >&2
fi
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
grep -qx '/.gpu/' "$exclude" 2>/dev/null || echo '/.gpu/' >>"$exclude"
ls -l .gpu/optjit-gpu.tar.xz
