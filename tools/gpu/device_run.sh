#!/usr/bin/env bash
# On a machine with an NVIDIA GPU and the bundle from tools/gpu/pack.sh in .gpu/: the CUDA
# parity tests (host-driven, device step, CUDA graph) and tuning tests, tuning clip+AdamW, the 1B-parameter benchmark against the device's
# copy bandwidth, and PyTorch's fused AdamW on the same GPU. Everything is logged to
# ${OUT:-.}/gpu.log.
set -uo pipefail
cd "$(dirname "$0")/../.."
log=${OUT:-.}/gpu.log
root=/tmp/optjit-gpu
rm -rf "$root" && mkdir -p "$root" && tar -xJf .gpu/optjit-gpu.tar.xz -C "$root" || exit 1
nvrtc=$(ls /usr/local/cuda/lib64/libnvrtc.so.13 /usr/local/cuda/lib/libnvrtc.so.13 \
  "$(python3 -c 'import nvidia.cuda_nvrtc, os; print(os.path.dirname(nvidia.cuda_nvrtc.__file__))' 2>/dev/null)"/lib/libnvrtc.so.13 \
  2>/dev/null | head -1)
export LD_LIBRARY_PATH="$root/lib:$(dirname "${nvrtc:-/usr/local/cuda/lib64/x}"):${LD_LIBRARY_PATH:-}"
export OPTJIT_CACHE_DIR=/tmp/optjit-cache
export OPTJIT_SOURCE_DIR=$PWD
optjit=$root/bin/optjit
pipeline='chain(clip_grad_norm(max_norm=1.0), adamw(lr=1e-3, weight_decay=0.01))'
{
  nvidia-smi -L
  "$optjit" devices
  "$root/bin/cuda_test" --gtest_brief=1
  "$optjit" tune "$pipeline" --backend cuda --numel 1000000000 --budget-seconds 120
  "$optjit" bench "$pipeline" --backend cuda --numel 1000000000 --steps 5 --reps 5
  "$optjit" bench "$pipeline" --backend cuda --numel 1000000000 --steps 5 --reps 5 --launch tuned
  "$optjit" tune "$pipeline" --backend cuda --shapes gpt2-small --budget-seconds 60
  "$optjit" bench "$pipeline" --backend cuda --shapes gpt2-small --launch tuned
  # The step's scalar program on the host, on the device, and as a replayed CUDA graph: the
  # overhead line (161 one-element tensors) is what the graph removes.
  for step in host device graph; do
    "$optjit" bench "$pipeline" --backend cuda --shapes resnet50 --no-unfused --step $step
  done
  "$optjit" bench "$pipeline" --backend cuda --numel 1000000000 --steps 5 --reps 5 --launch tuned --step graph
  # The same emitter through NVIDIA's OpenCL, where the image has its ICD (else a clear error).
  for step in host device; do
    "$optjit" bench "$pipeline" --backend opencl --shapes resnet50 --no-unfused --step $step
  done
  PYTHONUNBUFFERED=1 python3 bench/torch_adamw.py --optjit "$optjit" --device cuda --numel 1000000000 --launch tuned
  PYTHONUNBUFFERED=1 python3 bench/torch_adamw.py --optjit "$optjit" --device cuda --shapes gpt2-small --launch tuned
} 2>&1 | tee "$log"
