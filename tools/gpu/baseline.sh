#!/usr/bin/env bash
# Builds the CLI and library of another revision, for timings of two builds in the same lease:
# GPU machines differ from lease to lease (an H100 one session, an H200 the next), so a change
# is only measured against its baseline on the same machine, in alternation. tools/gpu/pack.sh
# bundles the baseline when it exists (under 1 MB stripped), and device_run.sh's quant stage
# benches each format with it and with this build, one after the other.
#   bash tools/gpu/baseline.sh REVISION      # e.g. the last revision that ran on a GPU
# The build goes to ${OPTJIT_BASELINE_DIR:-/tmp/optjit-baseline}/build (the source is a
# temporary git worktree, removed afterwards); about 6 minutes on 2 cores.
set -euo pipefail
rev=${1:?usage: tools/gpu/baseline.sh REVISION}
cd "$(dirname "$0")/../.."
dir=${OPTJIT_BASELINE_DIR:-/tmp/optjit-baseline}
sha=$(git rev-parse --verify "$rev^{commit}")
rm -rf "$dir"
git worktree prune
mkdir -p "$dir"
git worktree add --detach "$dir/src" "$sha" >/dev/null
trap 'git worktree remove --force "$dir/src" >/dev/null 2>&1 || true' EXIT
cmake -S "$dir/src" -B "$dir/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DOPTJIT_BUILD_TESTS=OFF -DOPTJIT_BUILD_PYTHON=OFF >/dev/null
cmake --build "$dir/build" -j2 --target optjit_cli
git log -1 --format='%H %s' "$sha" | cut -c1-120 >"$dir/build/REVISION"
echo "baseline: $(cat "$dir/build/REVISION")"
echo "baseline: $dir/build/optjit; tools/gpu/pack.sh bundles it"
