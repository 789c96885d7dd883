#!/usr/bin/env bash
# Static SASS instruction counts of a pipeline's CUDA kernels, with no GPU: `optjit compile`
# builds the cubins through NVRTC (the flags the backend uses), cuobjdump disassembles them.
# For comparing two builds' code for the same launch (an instruction cut measured before a
# lease times it); the dynamic count is ncu's smsp__inst_executed.sum (device_run.sh profile).
#   bash tools/gpu/sass_count.sh 'PIPELINE' [LAUNCH ...]     # e.g. vec=4,interleave=1,stage=2
# Prints, per launch, each kernel's instructions, branch regions (BSSY) and registers.
# cuobjdump (and the nvdisasm it runs, found beside it): $CUOBJDUMP, else on PATH, else
# /usr/local/cuda/bin, else from PyPI (nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm, unzipped
# under /tmp/optjit-cuobjdump).
# Environment: OPTJIT (the CLI, default build/optjit), ARCH (default sm_90).
set -euo pipefail
cd "$(dirname "$0")/../.."
pipeline=${1:?usage: tools/gpu/sass_count.sh PIPELINE [LAUNCH ...]}
shift
optjit=${OPTJIT:-build/optjit}
arch=${ARCH:-sm_90}
find_cuobjdump() {
  local c
  for c in "${CUOBJDUMP:-}" "$(command -v cuobjdump || true)" /usr/local/cuda/bin/cuobjdump \
    /tmp/optjit-cuobjdump/nvidia/cu*/bin/cuobjdump; do
    [ -n "$c" ] && [ -x "$c" ] && { echo "$c"; return; }
  done
  local d=/tmp/optjit-cuobjdump
  mkdir -p "$d"
  (cd "$d" && pip download -q --no-deps nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm >/dev/null &&
    for w in *.whl; do python3 -m zipfile -e "$w" .; done) >&2
  c=$(ls "$d"/nvidia/cu*/bin/cuobjdump 2>/dev/null | head -1)
  [ -n "$c" ] || { echo "sass_count: no cuobjdump (set CUOBJDUMP)" >&2; exit 1; }
  chmod +x "$(dirname "$c")"/*
  echo "$c"
}
cuobjdump=$(find_cuobjdump)
export PATH="$(dirname "$cuobjdump"):$PATH"
[ $# -eq 0 ] && set -- ""
for launch in "$@"; do
  out=$(mktemp -d)
  "$optjit" compile "$pipeline" --arch "$arch" --out "$out" ${launch:+--launch "$launch"} \
    >/dev/null
  cubin=$(ls "$out"/*.cubin)
  echo "# ${launch:-default}"
  "$cuobjdump" -sass "$cubin" | awk '
    /Function : / { f = $NF }
    f != "" && /^ +\/\*[0-9a-f]+\*\/ / { n[f]++; if ($0 ~ / BSSY /) b[f]++ }
    END { for (k in n) printf "%-22s %6d instructions %4d branch regions\n", k, n[k], b[k] }' |
    sort
  "$cuobjdump" -res-usage "$cubin" | awk '/Function/ { f = $2 } /REG:/ { sub(":$", "", f);
    for (i = 1; i <= NF; i++) if ($i ~ /^REG:/) printf "%-22s %s\n", f, $i }' | sort
  rm -rf "$out"
done
