#!/usr/bin/env bash
# Builds the pipeline-parser fuzzer with clang's libFuzzer (+ASan/UBSan) and runs it briefly
# from the seed corpus. Usage: run_smoke.sh SOURCE_DIR WORK_DIR [SECONDS]
set -euo pipefail
src=$1 work=$2 secs=${3:-20}
cxx=$(command -v clang++-14 || command -v clang++ || true)
if [ -z "$cxx" ]; then echo "clang++ not found: install clang-14 and libclang-rt-14-dev" >&2; exit 1; fi
mkdir -p "$work/corpus"
cp "$src"/tests/fuzz/corpus/* "$work/corpus/" 2>/dev/null || true
bin=$work/pipeline_parser_fuzzer
sources=(ir/types.cpp ir/program.cpp ir/verify.cpp ir/lexer.cpp ir/text.cpp ir/simplify.cpp ir/dsl.cpp
         ir/builtins.cpp ir/pipeline_text.cpp ir/plan.cpp ir/error.cpp)
stamp=$(cat "${sources[@]/#/$src/}" "$src/tests/fuzz/pipeline_parser_fuzzer.cpp" | md5sum | cut -c1-16)
if [ ! -x "$bin" ] || [ "$(cat "$bin.stamp" 2>/dev/null)" != "$stamp" ]; then
  "$cxx" -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -I"$src" "${sources[@]/#/$src/}" "$src/tests/fuzz/pipeline_parser_fuzzer.cpp" \
    $(pkg-config --cflags --libs libxxhash) -lfmt -o "$bin"
  echo "$stamp" > "$bin.stamp"
fi
"$bin" -max_total_time="$secs" -max_len=512 -timeout=10 -print_final_stats=1 "$work/corpus" 2>&1 | tail -n 12
