#!/usr/bin/env bash
# Runs one libFuzzer target from its committed corpus (tests/fuzz/corpus/TARGET). The targets
# are built with the rest of the build (tests/fuzz/CMakeLists.txt, into build/tests/fuzz-build).
# Usage: run_smoke.sh SOURCE_DIR FUZZ_BUILD_DIR TARGET [SECONDS | -runs=N ...]
#   TARGET: pipeline_parser | ir_text | safetensors | bundle_import | cli_args | checkpoint_import
#   e.g. tests/fuzz/run_smoke.sh . build/tests/fuzz-build safetensors -runs=10000000
set -euo pipefail
# Absolute paths: the fuzzer runs from its own work folder.
src=$(cd "$1" && pwd) fuzz_build=$2 target=$3
shift 3
run_args=("$@")
[ ${#run_args[@]} -eq 0 ] && run_args=(20)
[[ ${run_args[0]} =~ ^[0-9]+$ ]] && run_args=(-max_total_time="${run_args[0]}" "${run_args[@]:1}")
case $target in
  pipeline_parser) max_len=512 ;;
  ir_text) max_len=8192 ;;
  safetensors) max_len=4096 ;;
  bundle_import) max_len=65536 ;;
  checkpoint_import) max_len=32768 ;;
  cli_args) max_len=256 ;;
  *) echo "unknown fuzz target $target" >&2; exit 1 ;;
esac
bin=$fuzz_build/${target}_fuzzer
if [ ! -x "$bin" ]; then
  echo "no fuzz target $bin: the build makes them where CMake finds clang++" \
       "(apt-get install clang-14 libclang-rt-14-dev, then build again)" >&2
  exit 1
fi
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
work=$(dirname "$bin")/work/$target
mkdir -p "$work/corpus"
cp "$src/tests/fuzz/corpus/$target"/* "$work/corpus/"
# The safetensors reader also starts from every hand-made case of its conformance test.
[ "$target" = safetensors ] && cp "$src"/tests/fixtures/safetensors/*.safetensors "$work/corpus/"
# A target with a dictionary of its input's words (tests/fuzz/TARGET.dict) mutates with them.
dict=()
[ -f "$src/tests/fuzz/$target.dict" ] && dict=(-dict="$src/tests/fuzz/$target.dict")
# Sizes a hostile input asks for are refused by optjit's own checks before any allocation;
# an allocation that still fails must be a clean error, so the allocator may return null.
export ASAN_OPTIONS=${ASAN_OPTIONS:-allocator_may_return_null=1:detect_leaks=0}
cd "$work"
"$bin" -max_len=$max_len -timeout=10 -rss_limit_mb=4096 -close_fd_mask=1 -print_final_stats=1 \
  "${dict[@]}" "${run_args[@]}" "$work/corpus" 2>&1 | tail -n 14
