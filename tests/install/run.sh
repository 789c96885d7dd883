#!/usr/bin/env bash
# Installs the built tree into a prefix, builds tests/install/consumer against it with
# find_package(optjit), runs it and checks its output. Usage: run.sh BUILD_DIR WORK_DIR
set -euo pipefail
build=$1 work=$2
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work"
cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
test -x "$work/prefix/bin/optjit"
test -f "$work/prefix/lib/cmake/optjit/optjitConfig.cmake" || test -f "$work/prefix/lib64/cmake/optjit/optjitConfig.cmake"
cmake -S "$here/consumer" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" > "$work/configure.log"
cmake --build "$work/build" -j2 > "$work/build.log"
out=$("$work/build/consumer")
echo "$out"
# |g| = 5 > max_norm 1, so the clipped gradient is (0.6, -0.8, 0); sign(m) = (1, -1, 0).
[ "$out" = "passes=2 bytes=24 w=-0.5 0.5 0" ]
"$work/prefix/bin/optjit" list > /dev/null


# The examples, against the same installed package.
cmake -S "$here/../../examples" -B "$work/examples" -DCMAKE_PREFIX_PATH="$work/prefix" > "$work/examples-configure.log"
cmake --build "$work/examples" -j2 > "$work/examples-build.log"
"$work/examples/custom_optimizer" | tail -n 2
"$work/examples/train_mlp" | tail -n 2
"$work/examples/train_mlp" opencl | tail -n 2   # the same network, its optimizer on PoCL
echo "examples: ok"
