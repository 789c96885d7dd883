#!/usr/bin/env bash
# On a machine with an NVIDIA GPU and the bundle from tools/gpu/pack.sh in .gpu/, the GPU run as
# a series of stages, each well under 10 minutes, named on the command line in order:
#   smoke   glibc, the GPU, NVRTC found, ldd clean, one compile, one small test (stops the rest
#           when it fails)
#   tests   every CUDA test (parity with the host step, the device step and the CUDA graph,
#           tuning), in parallel shards
#   bench   tune, then bench clip+AdamW at 2e8 and 1e9 parameters and gpt2-small with the tuned
#           launch; host, device and graph steps on resnet50 and many-small shapes
#   torch   the same against torch's AdamW(fused=True) + clip_grad_norm_(foreach=True)
#   quick   for a short lease: a 20 s tune and the host and graph steps at 2e8 parameters, and the
#           same against torch's fused AdamW at 2e8 and on resnet50 shapes
#   quant   clip + AdamW with fp32, 8-bit, 4-bit and fp8 state at 268M parameters: the default
#           launch, vectors, resident=768, L2 prefetches trips ahead, two sweeps a trip,
#           prefetching (#12); with a baseline in the bundle (tools/gpu/baseline.sh), the default
#           also with the baseline's build, just before
#   staged  the quantized launches with trips staged in shared memory (stage=N): their bits
#           against the CPU, then their speed against the best unstaged launch (#12)
#   versus  this build against the bundle's baseline (tools/gpu/baseline.sh), in alternation:
#           each quantized format at the staged launch both know, and the bits of this build's
#           quantized default against the CPU (#12: fewer instructions for the same bits)
#   bf16    bf16 clip + AdamW, AdamW after the deferred clip, and AdamW alone at 124M, with
#           vectors of 1, 4 and 8 and 4 items a thread
#   sweep   clip + AdamW at 268M parameters, each "format:launch" of $OPTJIT_GPU_SWEEP (f32
#           or a state_format; the launch empty for the plan's default, or "tuned": tuned
#           first, 60 s; "base/format:launch" with the bundle's baseline) in turn,
#           ${OPTJIT_GPU_ROUNDS:-2} rounds: launches chosen after a lease's first results, with
#           no change to the kit; first the cuda_test tests $OPTJIT_GPU_FILTER selects, if set
#   profile Nsight Compute on the quantized update kernels (4-bit, 8-bit, fp8): where their time goes
#   opencl  the emitter through NVIDIA's OpenCL, where the image has its ICD
#   webgpu  #15 on NVIDIA: the WebGPU backend (the bundle's wgpu-native, the machine's Vulkan
#           driver) against the CUDA backend on the same GPU, clip+AdamW at 16M and 256M, then
#           webgpu_test (every fixture against torch and the reference) on that adapter
#   webgpu_test  only webgpu_test, on the machine's adapters
#   python  builds the Python module against the bundle's liboptjit with the machine's Python,
#           nanobind and compiler (python/CMakeLists.txt alone), runs python/tests_gpu (optjit.torch
#           on CUDA tensors against torch and bitsandbytes on the same GPU), bench/torch_bridge.py
#           and bench/quantized_state.py (8-bit and 4-bit state against bitsandbytes) on CUDA,
#           bench/deferred_clip.py (torch's clip_grad_norm_ deferred into the step) on CUDA, with
#           f32 and bf16 models
#   python_some  the python tests -k "$OPTJIT_GPU_K" selects (-s: their prints), then
#           bench/deferred_clip.py as above: a short rerun after a fix
#   compile optjit.torch against torch.compile of torch's fused AdamW + clip on CUDA tensors
#           (bench/torch_bridge.py with its compile column; builds the module unless the python
#           stage did)
# e.g. bash tools/gpu/device_run.sh smoke tests. Logs go to ${OUT:-.}/<stage>.log (and
# tests/*.xml); the kernel cache stays in /tmp/optjit-cache while the machine is warm, but bench
# tunes what it benches itself.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-.}
root=/tmp/optjit-gpu
export OPTJIT_CACHE_DIR=/tmp/optjit-cache
export OPTJIT_SOURCE_DIR=$PWD
export OPTJIT_CLI=$root/bin/optjit  # the tests that run the CLI
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH="$root/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
optjit=$root/bin/optjit
cuda_test=$root/bin/cuda_test
# The pipeline the stages bench: clip + AdamW unless $OPTJIT_GPU_PIPELINE names another whose
# last call takes state_format (sweep's formats are appended to it).
P=${OPTJIT_GPU_PIPELINE:-'chain(clip_grad_norm(max_norm=1.0), adamw(lr=1e-3, weight_decay=0.01))'}
# Clip + AdamW with state format $1: f32 (the plain pipeline, $P) or a state_format.
qpipeline() {
  if [ "$1" = f32 ]; then
    echo "$P"
  else
    echo "${P%))}, state_format=\"$1\"))"
  fi
}

unpack() {
  rm -rf "$root" && mkdir -p "$root" && tar -xJf .gpu/optjit-gpu.tar.xz -C "$root" || {
    echo "device_run: cannot unpack .gpu/optjit-gpu.tar.xz (run tools/gpu/pack.sh and carry .gpu)"
    exit 1
  }
}

# NVRTC in a fixed order: $OPTJIT_NVRTC, the toolkit, then CUDA 13's and CUDA 12's Python
# wheels. optjit loads it at run time (codegen/nvrtc.cpp) from OPTJIT_NVRTC.
find_nvrtc() {
  local site c
  site=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null)
  for c in "${OPTJIT_NVRTC:-}" /usr/local/cuda/lib64/libnvrtc.so.13 \
    /usr/local/cuda/targets/x86_64-linux/lib/libnvrtc.so.13 \
    "$site/nvidia/cu13/lib/libnvrtc.so.13" "$site/nvidia/cuda_nvrtc/lib/libnvrtc.so.13" \
    "$site/nvidia/cuda_nvrtc/lib/libnvrtc.so.12" /usr/local/cuda/lib64/libnvrtc.so.12; do
    [ -n "$c" ] && [ -e "$c" ] && { echo "$c"; return 0; }
  done
  return 1
}

# NCCL in a fixed order: $OPTJIT_NCCL, the machine's Python wheel, the toolkit.
find_nccl() {
  local site c
  site=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null)
  for c in "${OPTJIT_NCCL:-}" "$site/nvidia/nccl/lib/libnccl.so.2" \
    "$site/nvidia/cu13/lib/libnccl.so.2" /usr/local/cuda/lib64/libnccl.so.2 \
    /usr/local/cuda/lib/libnccl.so.2; do
    [ -n "$c" ] && [ -e "$c" ] && { echo "$c"; return 0; }
  done
  c=$(find "$site/nvidia" -name libnccl.so.2 2>/dev/null | head -1)
  [ -n "$c" ] && { echo "$c"; return 0; }
  return 1
}

smoke() {
  local glibc
  glibc=$(ldd --version | head -1 | grep -oE '[0-9]+\.[0-9]+$')
  echo "glibc $glibc"
  if [ "$(printf '%s\n2.36\n' "$glibc" | sort -V | head -1)" != "2.36" ]; then
    echo "smoke: the bundle was built against glibc 2.36 (Debian 12); this machine has $glibc"
    return 1
  fi
  nvidia-smi -L || { echo "smoke: nvidia-smi sees no GPU"; return 1; }
  local nvrtc
  nvrtc=$(find_nvrtc) || { echo "smoke: NVRTC not found (set OPTJIT_NVRTC)"; return 1; }
  export OPTJIT_NVRTC=$nvrtc
  echo "NVRTC: $nvrtc"
  if ldd "$optjit" "$cuda_test" "$root"/lib/*.so* | grep 'not found'; then
    echo "smoke: libraries missing"
    return 1
  fi
  "$optjit" devices || return 1
  "$optjit" compile "$P" --backend cuda --arch sm_90 --step graph || return 1
  "$cuda_test" --gtest_filter='Cuda.HasADevice:CudaParity.*/0:CudaDeviceStep.*/0:CudaGraph.*' \
    --gtest_brief=1 || return 1
}

tests() {
  mkdir -p "$out/tests"
  local shards=8 i failed=0
  for ((i = 0; i < shards; i++)); do
    GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i "$cuda_test" --gtest_brief=1 \
      --gtest_output="xml:$out/tests/shard$i.xml" >"$out/tests/shard$i.log" 2>&1 &
  done
  for ((i = 0; i < shards; i++)); do wait -n || failed=1; done
  grep -h "tests ran\|PASSED\|FAILED" "$out"/tests/shard*.log | sort | uniq -c
  grep -h -B30 "^\[  FAILED  \]" "$out"/tests/shard*.log | head -400
  # CUDA's launch-shape property (15 random pipelines, dtypes and launch shapes).
  if [ -x "$root/bin/cuda_property_test" ]; then
    "$root/bin/cuda_property_test" --gtest_brief=1 >"$out/tests/property.log" 2>&1 || failed=1
    grep -E "OK, passed|Falsifiable|FAILED" "$out/tests/property.log"
  fi
  return $failed
}

bench() {
  local n
  for n in 200000000 1000000000; do
    "$optjit" tune "$P" --backend cuda --numel $n --budget-seconds 60 || return 1
    "$optjit" bench "$P" --backend cuda --numel $n --steps 5 --reps 5 --launch tuned --step host
    "$optjit" bench "$P" --backend cuda --numel $n --steps 5 --reps 5 --launch tuned --step graph
  done
  "$optjit" bench "$P" --backend cuda --numel 1000000000 --steps 5 --reps 5
  "$optjit" tune "$P" --backend cuda --shapes gpt2-small --budget-seconds 45
  "$optjit" bench "$P" --backend cuda --shapes gpt2-small --launch tuned --step graph
  # The scalar program on the host, on the device, and as a replayed CUDA graph: the overhead
  # line (one-element tensors) is what the graph removes.
  for shapes in resnet50 many-small; do
    for step in host device graph; do
      "$optjit" bench "$P" --backend cuda --shapes $shapes --no-unfused --step $step
    done
  done
}

torch_cmp() {
  local t=bench/torch_adamw.py
  "$optjit" tune "$P" --backend cuda --numel 1000000000 --budget-seconds 60 || return 1
  "$optjit" tune "$P" --backend cuda --shapes gpt2-small --budget-seconds 45 || return 1
  python3 $t --optjit "$optjit" --device cuda --numel 1000000000 --launch tuned --step graph
  python3 $t --optjit "$optjit" --device cuda --shapes gpt2-small --launch tuned --step graph
  for step in device graph; do
    python3 $t --optjit "$optjit" --device cuda --shapes resnet50 --step $step --steps 20
    python3 $t --optjit "$optjit" --device cuda --shapes many-small --step $step --steps 20
  done
}

quick() {
  local n=200000000 t=bench/torch_adamw.py step
  "$optjit" tune "$P" --backend cuda --numel $n --budget-seconds 20 || return 1
  for step in host graph; do
    "$optjit" bench "$P" --backend cuda --numel $n --steps 5 --reps 3 --launch tuned --step $step
  done
  python3 $t --optjit "$optjit" --device cuda --numel $n --launch tuned --step graph
  python3 $t --optjit "$optjit" --device cuda --shapes resnet50 --step graph --steps 20
}

# #12 on the GPU: clip + AdamW with each state format at 268M parameters, as a graph, against
# the roofline of its own bytes per parameter (optjit bench's "of copy"): the default launch,
# then vectors of 4 elements a lane (--launch vec=4) alone, with a vector's elements side by
# side (interleave=1), alone and with the lines of the trip 2 ahead fetched into L2 (ahead=2),
# with ahead=2 alone, with two sweeps a trip (recompute=1: fewer registers, the inputs loaded
# twice), alone and with ahead=2, and with 768 threads resident per SM (80 registers a thread,
# spills traded for occupancy); 4-bit also with each warp's next trip prefetched (--launch
# prefetch=1), alone and with ahead=1 (about 12 s a bench on an H100: 30 benches).
# One bench of clip + AdamW at 268M parameters as a CUDA graph: state format $1 (f32, or a
# state_format), launch $2 (empty: the default for the plan), after a "# this build" header;
# bbench: the same with the baseline's build (tools/gpu/baseline.sh), its own kernel cache,
# after a "# baseline" header.
qbench() { bench_build "this build" "$@"; }
bbench() { bench_build baseline "$@"; }
bench_build() {
  local q bin=$optjit env=()
  q=$(qpipeline "$2")
  if [ "$1" = baseline ]; then
    bin=$root/baseline/bin/optjit
    env=(OPTJIT_CACHE_DIR=/tmp/optjit-cache-baseline
         LD_LIBRARY_PATH="$root/baseline/lib:$LD_LIBRARY_PATH")
  fi
  echo "# $1, $2, ${3:-default}"
  env "${env[@]}" "$bin" bench "$q" --backend cuda --numel 268435456 --steps 5 --reps 5 \
    --no-unfused --step graph ${3:+--launch $3}
}

quant() {
  local f l n=268435456 base=$root/baseline
  "$optjit" bench "$P" --backend cuda --numel $n --steps 5 --reps 5 --no-unfused --step graph
  [ -x "$base/bin/optjit" ] && echo "baseline: $(cat "$base/REVISION")"
  for f in 8bit 4bit f8; do
    [ -x "$base/bin/optjit" ] && bbench $f tables=global
    # This build (prefetching the next trip helped only 4-bit on the H100, 2026-11-27; two
    # blocks a warp trip were slower for every format), the likeliest first: interleaved
    # elements (ncu's largest stall for 8-bit and fp8 was fixed-latency dependencies), L2
    # prefetches, two sweeps, more resident threads.
    local ls="tables=global vec=4 vec=4,interleave=1 vec=4,interleave=1,ahead=2 vec=4,ahead=2"
    ls="$ls vec=4,recompute=1 vec=4,recompute=1,ahead=2 vec=4,resident=768"
    [ $f = 4bit ] && ls="$ls prefetch=1 prefetch=1,ahead=1"
    for l in $ls; do qbench $f $l; done
  done
}

# This build against the baseline's, the same launch, one after the other, two rounds (about
# 10 s a bench on an H200: 13 benches); f32 state at vec=4 once, for the ratio. First the
# device check of the branch-free division and root (optjit_fdiv_by, the root's narrower
# range), and the bits of the quantized default and of the staged launches against the CPU
# (3 tests of 6 pipelines).
versus() {
  local f r rc=0
  [ -x "$root/baseline/bin/optjit" ] || { echo "versus: the bundle has no baseline"; return 1; }
  echo "baseline: $(cat "$root/baseline/REVISION")"
  "$cuda_test" --gtest_brief=1 \
    --gtest_filter='Cuda.BranchFree*:Fixtures/CudaQuantizedLaunch.*/0:Fixtures/CudaQuantizedLaunch.*/17:Fixtures/CudaQuantizedLaunch.*/18' ||
    rc=1
  qbench f32 vec=4
  for r in 1 2; do
    for f in 8bit f8 4bit; do
      bbench $f vec=4,interleave=1,stage=2
      qbench $f vec=4,interleave=1,stage=2
    done
  done
  return $rc
}

# Trips staged in shared memory by cp.async (--launch stage=N, #12): first the bits, against
# the CPU, of the quantized default (staged) and of the two staged launches of
# Fixtures/CudaQuantizedLaunch (6 pipelines each); then clip + AdamW at 268M parameters with
# f32 state (vec=4, the best there, for the ratio) and, per format, the default (vec=4,
# interleave=1, stage=2 on sm_90) against staging without interleaving, more resident threads,
# smaller blocks, two blocks a trip with one trip staged, and (4-bit) four trips (14 benches,
# about 10 s each on an H200).
staged() {
  local f l rc=0
  "$cuda_test" --gtest_brief=1 \
    --gtest_filter='Fixtures/CudaQuantizedLaunch.*/0:Fixtures/CudaQuantizedLaunch.*/17:Fixtures/CudaQuantizedLaunch.*/18' ||
    rc=1
  qbench f32 vec=4
  for f in 8bit f8 4bit; do
    local ls="default vec=4,stage=2"
    [ $f = 8bit ] && ls="$ls vec=4,interleave=1,stage=2,resident=768 vec=4,interleave=1,stage=2,block=128 vec=4,items=2,stage=1"
    [ $f = 4bit ] && ls="$ls vec=4,interleave=1,stage=4 vec=4,stage=4"
    for l in $ls; do qbench $f "${l#default}"; done
  done
  return $rc
}

# Launches named in the environment, in alternation (see the header): e.g.
#   OPTJIT_GPU_SWEEP="f32:vec=4 8bit: 8bit:vec=4,stage=2,block=128 8bit:tuned" lease.sh sweep:250
sweep() {
  local e f r rc=0
  local -A tuned=()  # each format named with "tuned" is tuned once
  [ -n "${OPTJIT_GPU_SWEEP:-}" ] || { echo "sweep: set OPTJIT_GPU_SWEEP"; return 1; }
  for e in $OPTJIT_GPU_SWEEP; do
    case $e in base/*:tuned)
      echo "sweep: $e: only this build is tuned here"
      return 1
      ;;
    esac
  done
  if [ -n "${OPTJIT_GPU_FILTER:-}" ]; then
    "$cuda_test" --gtest_brief=1 --gtest_filter="$OPTJIT_GPU_FILTER" || rc=1
  fi
  for e in $OPTJIT_GPU_SWEEP; do
    f=${e%%:*}
    [ "${e#*:}" = tuned ] && [ -z "${tuned[$f]:-}" ] || continue
    "$optjit" tune "$(qpipeline "$f")" --backend cuda --numel 268435456 --budget-seconds 60 ||
      return 1
    tuned[$f]=1
  done
  for ((r = 1; r <= ${OPTJIT_GPU_ROUNDS:-2}; r++)); do
    for e in $OPTJIT_GPU_SWEEP; do
      case $e in
        base/*) e=${e#base/} && bbench "${e%%:*}" "${e#*:}" ;;
        *) qbench "${e%%:*}" "${e#*:}" ;;
      esac
    done
  done
  return $rc
}

# bf16 parameters and state (2 bytes an element), clip + AdamW at gpt2-small's size: the
# default launch moves 2 bytes a thread a load; vectors move 8 or 16. Then AdamW after
# optjit.torch's deferred clip (the gradients scaled by a coefficient and rounded to bf16 in the
# step), which on the H100 (2026-11-27) made the bridge's bf16 step slower than torch's clip
# and the plain step, and AdamW alone (12 benches).
bf16() {
  local d l
  d=$(printf 'transform optjit_deferred_clip(optjit_clip_coef=1.0) {\n  grad = like_grad(grad * optjit_clip_coef)\n}\nchain(optjit_deferred_clip(optjit_clip_coef=0.5), adamw(lr=1e-3, weight_decay=0.01))')
  for l in vec=1 vec=4 vec=8 items=4; do
    echo "# this build, bf16 parameters and state, $l"
    "$optjit" bench "$P" --backend cuda --dtype bf16 --numel 124439808 --steps 5 --reps 5 \
      --no-unfused --step graph --launch $l
    echo "# this build, bf16, AdamW after the deferred clip, $l"
    "$optjit" bench "$d" --backend cuda --dtype bf16 --numel 124439808 --steps 5 --reps 5 \
      --no-unfused --step graph --launch $l
    echo "# this build, bf16, AdamW alone, $l"
    "$optjit" bench "adamw(lr=1e-3, weight_decay=0.01)" --backend cuda --dtype bf16 \
      --numel 124439808 --steps 5 --reps 5 --no-unfused --step graph --launch $l
  done
}

# Where the quantized steps' time goes: Nsight Compute on the update pass (optjit_pass_1) of
# clip + AdamW at 64M parameters: 8-bit with the best unstaged launch of the H200's 2026-11-27
# run and with two trips staged (the default), interleaved and not; 4-bit with four staged, fp8
# with two (speed of light, memory, warp stalls, issue slots, occupancy, and the SASS lines
# where warps stall most; each stall reason's cycles per issued instruction, which the sections
# name only the largest of: long_scoreboard is memory, wait and short_scoreboard fixed and MUFU
# latencies; "Issued Warp Per Scheduler" near 1 would mean the step is bound by instructions,
# not memory); the reports' text in profile.log.
profile() {
  local f ncu
  ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
  [ -n "$ncu" ] || { echo "profile: no ncu here"; return 1; }
  for f in 4bit:global,vec=4,interleave=1,stage=4 8bit:global,vec=4,interleave=1,ahead=2 \
    8bit:global,vec=4,interleave=1,stage=2 8bit:global,vec=4,stage=2 f8:global,vec=4,interleave=1,stage=2; do
    echo "### ${f%%:*}, tables=${f#*:}"
    "$ncu" --clock-control none --kernel-name optjit_pass_1 --launch-count 1 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
      --section SchedulerStats --section Occupancy --section LaunchStats --section SourceCounters \
      --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__inst_executed.sum' \
      "$optjit" bench "$(qpipeline "${f%%:*}")" \
      --backend cuda --numel 67108864 --steps 1 --reps 1 --no-unfused --step host --launch tables=${f#*:}
  done
}

opencl() {
  for step in host device; do
    "$optjit" bench "$P" --backend opencl --shapes resnet50 --no-unfused --step $step
  done
}

webgpu_setup() {
  local lib
  lib=$(ls "$root"/lib/libwgpu_native*.so 2>/dev/null | head -1)
  [ -n "$lib" ] || { echo "webgpu: the bundle has no wgpu-native (pip install wgpu, then pack)"; return 1; }
  export OPTJIT_WGPU_LIBRARY=$lib
  # NVIDIA's Vulkan driver loads through libglvnd, which the image lacks: pack.sh's Debian
  # packages, unpacked into / (the machine is lent bare and given back).
  local deb
  for deb in .gpu/gl/*.deb; do [ -e "$deb" ] && dpkg -x "$deb" /; done
  ldconfig
  local icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
  [ -z "${VK_DRIVER_FILES:-}" ] && [ -e "$icd" ] && export VK_DRIVER_FILES=$icd
  echo "Vulkan drivers the loader can find:"
  ls /usr/share/vulkan/icd.d /etc/vulkan/icd.d /usr/local/share/vulkan/icd.d 2>&1
  ldconfig -p | grep -E 'libGLX_nvidia|libnvidia-vulkan|libnvidia-glvkspirv' ||
    echo "(no NVIDIA Vulkan libraries in ldconfig's cache)"
  "$optjit" devices || return 1
  "$optjit" devices | grep -qi 'webgpu.*nvidia\|nvidia.*vulkan' ||
    { echo "webgpu: wgpu-native finds no NVIDIA adapter here (no Vulkan driver for it)"; return 1; }
}

webgpu() {
  local n
  webgpu_setup || return 1
  for n in 16777216 268435456; do
    "$optjit" bench "$P" --backend webgpu --numel $n --steps 5 --reps 5 --no-unfused
    "$optjit" bench "$P" --backend cuda --numel $n --steps 5 --reps 5 --no-unfused
  done
  webgpu_test
}

# webgpu_test (every fixture against torch and the reference, the CPU's bits) on the machine's
# adapters; a crash is run again under cuda-gdb (the image has no gdb) for its backtrace.
webgpu_test() {
  [ -x "$root/bin/webgpu_test" ] || { echo "webgpu: the bundle has no webgpu_test"; return 1; }
  [ -n "${OPTJIT_WGPU_LIBRARY:-}" ] || webgpu_setup || return 1
  local rc
  "$root/bin/webgpu_test" --gtest_brief=1 --gtest_output="xml:$out/webgpu_test.xml"
  rc=$?
  if [ "$rc" -gt 128 ] && command -v cuda-gdb >/dev/null; then
    echo "webgpu_test died with signal $((rc - 128)); again under cuda-gdb:"
    timeout 120 cuda-gdb -batch -ex run -ex bt -ex 'info threads' --args "$root/bin/webgpu_test" \
      --gtest_brief=1 2>&1 | tail -80
  fi
  return $rc
}

# The Python module, built against the bundle's liboptjit with the machine's Python and nanobind.
build_module() {
  local b=/tmp/optjit-py gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  rm -rf "$b"
  cmake -S python -B "$b" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DPython_EXECUTABLE="$(command -v python3)" -DOPTJIT_LIBRARY="$root/lib/liboptjit.so.0.1" \
    -DOPTJIT_FMT_INCLUDE="$root/include" || return 1
  cmake --build "$b" -j 8
}

python_bridge() {
  local b=/tmp/optjit-py rc=0
  build_module || return 1
  # The bundle's bitsandbytes (pack.sh) after the machine's own packages.
  export PYTHONPATH="$b/python:$root/pylib"
  python3 -m pytest -q -p no:cacheprovider python/tests_gpu --junitxml="$out/python_tests.xml" ||
    rc=1
  python3 tools/gpu/queue_waits.py || rc=1  # which layer of a NCCL-sharded step waits (#13)
  python3 bench/torch_bridge.py --device cuda --no-compile || rc=1
  python3 bench/quantized_state.py --device cuda --numel 268435456 --no-torchao || rc=1
  deferred_clip_benches || rc=1
  python3 bench/quantized_state.py --device cuda --shapes gpt2-small --no-torchao || rc=1
  return $rc
}

# torch's clip_grad_norm_ deferred into the step, on f32 and bf16 models.
deferred_clip_benches() {
  local rc=0
  python3 bench/deferred_clip.py --device cuda --shapes gpt2-small || rc=1
  python3 bench/deferred_clip.py --device cuda --shapes gpt2-small --dtype bfloat16 || rc=1
  return $rc
}

# The Python tests that -k "$OPTJIT_GPU_K" selects (all when unset), then the deferred clip's
# benches: a short rerun after a fix.
python_some() {
  local b=/tmp/optjit-py rc=0
  build_module || return 1
  export PYTHONPATH="$b/python:$root/pylib"
  python3 -m pytest -q -s -p no:cacheprovider python/tests_gpu -k "${OPTJIT_GPU_K:-}" || rc=1
  deferred_clip_benches || rc=1
  return $rc
}

compile() {
  [ -d /tmp/optjit-py/python/optjit ] || build_module || return 1
  PYTHONPATH="/tmp/optjit-py/python:$root/pylib" python3 bench/torch_bridge.py --device cuda
}

unpack
export OPTJIT_NVRTC=${OPTJIT_NVRTC:-$(find_nvrtc)}
OPTJIT_NCCL=$(find_nccl) && export OPTJIT_NCCL
status=0
for stage in "${@:-smoke}"; do
  fn=$stage
  [ "$stage" = torch ] && fn=torch_cmp
  [ "$stage" = python ] && fn=python_bridge
  case $stage in smoke | tests | bench | quick | quant | staged | versus | sweep | bf16 | profile | torch | opencl | webgpu | webgpu_test | python | python_some | compile) ;; *)
    echo "device_run: unknown stage $stage"
    exit 2
    ;;
  esac
  echo "== $stage ($(date -u +%T))"
  start=$SECONDS
  $fn 2>&1 | tee "$out/$stage.log"
  rc=${PIPESTATUS[0]}
  echo "== $stage: exit $rc after $((SECONDS - start)) s" | tee -a "$out/$stage.log"
  [ "$rc" -ne 0 ] && status=1 && [ "$stage" = smoke ] && exit 1
done
exit $status
