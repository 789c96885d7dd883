#!/usr/bin/env bash
# Builds one libFuzzer target with clang (+ASan/UBSan) and runs it from its committed corpus.
# Usage: run_smoke.sh SOURCE_DIR BUILD_DIR TARGET [SECONDS | -runs=N ...]
#   TARGET: pipeline_parser | safetensors | bundle_import | cli_args | checkpoint_import
# The input surface itself is compiled with instrumentation; what lies behind it comes from the
# build's liboptjit (not instrumented: a crash there is still caught, a subtler memory error
# is not). The pipeline parser is compiled whole.
set -euo pipefail
# Absolute paths: the fuzzer runs from its own work folder.
src=$(cd "$1" && pwd) build=$(cd "$2" && pwd) target=$3
shift 3
run_args=("$@")
[ ${#run_args[@]} -eq 0 ] && run_args=(20)
[[ ${run_args[0]} =~ ^[0-9]+$ ]] && run_args=(-max_total_time="${run_args[0]}" "${run_args[@]:1}")
cxx=$(command -v clang++-14 || command -v clang++ || true)
if [ -z "$cxx" ]; then echo "clang++ not found: install clang-14 and libclang-rt-14-dev" >&2; exit 1; fi
work=$build/tests/fuzz/$target
mkdir -p "$work/corpus"
cp "$src/tests/fuzz/corpus/$target"/* "$work/corpus/"
# The safetensors reader also starts from every hand-made case of its conformance test.
[ "$target" = safetensors ] && cp "$src"/tests/fixtures/safetensors/*.safetensors "$work/corpus/"

lib=(-L"$build" -loptjit -Wl,-rpath,"$(cd "$build" && pwd)")
plain=()  # sources behind the surface that the target never reaches: built uninstrumented
max_len=512
case $target in
  pipeline_parser)
    sources=(ir/types.cpp ir/quant.cpp ir/program.cpp ir/verify.cpp ir/lexer.cpp ir/text.cpp ir/simplify.cpp
             ir/dsl.cpp ir/builtins.cpp ir/pipeline_text.cpp ir/plan.cpp ir/error.cpp)
    libs=($(pkg-config --libs libxxhash) -lfmt) ;;
  safetensors)
    sources=(runtime/safetensors.cpp support/output_file.cpp)
    libs=("${lib[@]}" -lfmt); max_len=4096 ;;
  bundle_import)
    sources=(cache/bundle.cpp cache/kernel_cache.cpp)
    libs=("${lib[@]}" -lsqlite3 -lsodium $(pkg-config --libs libxxhash) -lfmt); max_len=65536 ;;
  checkpoint_import)
    sources=(runtime/state.cpp runtime/safetensors.cpp)
    libs=("${lib[@]}" -lfmt); max_len=32768 ;;
  cli_args)
    # bench.cpp holds bench and tune, which the target never runs (they time and tune): it is
    # linked uninstrumented, after the rest, so that the instrumented copies of the inline
    # functions they share are the ones kept (a third of the build: 28 s of 88 instrumented,
    # 7 s plain).
    sources=(tools/optjit/main.cpp tools/optjit/commands.cpp)
    plain=(tools/optjit/bench.cpp)
    libs=("${lib[@]}" -lfmt -DOPTJIT_CLI_NO_MAIN); max_len=256 ;;
  *) echo "unknown fuzz target $target" >&2; exit 1 ;;
esac
bin=$work/${target}_fuzzer
all=("${sources[@]/#/$src/}" "$src/tests/fuzz/${target}_fuzzer.cpp")
# Rebuilt when any source or header changes: the target's objects and liboptjit must agree on
# every struct's layout.
stamp=$(cd "$src" && find api autotune cache codegen ir runtime support tools tests/fuzz \
          -name '*.h' -o -name '*.cpp' | sort | xargs cat "$0" | md5sum | cut -c1-16)
# -O1: at -O0 the build is twice as quick, but the parser's fuzzer ran 857 inputs in 22 s (only
# its corpus) against 85437 in 16 s. Line tables are all a report's stack needs (file:line);
# full debug information made the build about 10% longer.
if [ ! -x "$bin" ] || [ "$(cat "$bin.stamp" 2>/dev/null)" != "$stamp" ]; then
  objects=()
  for f in "${plain[@]}"; do
    "$cxx" -std=c++20 -O0 -Wno-unknown-pragmas -DOPTJIT_CLI_NO_MAIN -I"$src" \
      $(pkg-config --cflags libxxhash) -c "$src/$f" -o "$work/$(basename "$f").o"
    objects+=("$work/$(basename "$f").o")
  done
  "$cxx" -std=c++20 -O1 -gline-tables-only -fsanitize=fuzzer,address,undefined \
    -fno-sanitize-recover=undefined \
    -Wno-unknown-pragmas -DOPTJIT_CLI_NO_MAIN -I"$src" $(pkg-config --cflags libxxhash) \
    "${all[@]}" "${objects[@]}" "${libs[@]}" -o "$bin"
  echo "$stamp" > "$bin.stamp"
fi
# Sizes a hostile input asks for are refused by optjit's own checks before any allocation;
# an allocation that still fails must be a clean error, so the allocator may return null.
export ASAN_OPTIONS=${ASAN_OPTIONS:-allocator_may_return_null=1:detect_leaks=0}
cd "$work"
"$bin" -max_len=$max_len -timeout=10 -rss_limit_mb=4096 -close_fd_mask=1 -print_final_stats=1 \
  "${run_args[@]}" "$work/corpus" 2>&1 | tail -n 14
