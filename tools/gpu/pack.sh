#!/usr/bin/env bash
# Packs the built optjit (CLI, library, CUDA tests) with the shared libraries it needs that a
# GPU machine's image lacks (LLVM 15, SQLite, fmt, libsodium, xxHash, OpenCL's loader, ...) into
# .gpu/optjit-gpu.tar.xz (about 41 MB), for machines that can run CUDA but cannot install
# Debian's packages. Then, on such a machine, with .gpu carried along:
#   bash tools/gpu/device_run.sh     # parity, tuning, benchmarks; the log goes to $OUT/gpu.log
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
# Everything the binaries load except the C runtime, libstdc++ (the GPU image's is newer) and
# NVRTC (which must match the machine's CUDA).
ldd "$build/optjit" "$build/tests/cuda_test" | awk '/=>/ {print $3}' | sort -u |
  grep -Ev '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*|libstdc\+\+|libgcc_s|libnvrtc[^/]*)\.so' |
  while read -r lib; do cp -L "$lib" "$stage/lib/"; done
# NCCL (loaded at run time by api/nccl_communicator.cpp): the toolkit's, as a fallback for a
# machine without its own (device_run.sh prefers the machine's Python wheel).
for nccl in /usr/local/cuda/lib/libnccl.so.2 /usr/local/cuda/lib64/libnccl.so.2; do
  [ -e "$nccl" ] && { cp -L "$nccl" "$stage/lib/libnccl.so.2"; break; }
done
strip "$stage"/bin/* "$stage"/lib/* 2>/dev/null || true
tar -cJf .gpu/optjit-gpu.tar.xz -C "$stage" .
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
grep -qx '/.gpu/' "$exclude" 2>/dev/null || echo '/.gpu/' >>"$exclude"
ls -l .gpu/optjit-gpu.tar.xz
