#!/usr/bin/env bash
# The command line's CUDA paths under the CUDA emulator (ctest: cli.emulated_cuda): `optjit run
# --backend cuda` writes the same tensors, bit for bit, as `--backend cpu` for 8-bit, 4-bit
# and fp8 state (the quantized kernels are bit-exact with the CPU's); `optjit tune --backend
# cuda` stores a decision that `optjit bench --launch tuned` then uses.
# Usage: cli_check.sh OPTJIT (with the emulator's LD_LIBRARY_PATH and OPTJIT_NVRTC set).
set -euo pipefail
optjit=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir"

"$optjit" devices | grep -q '^cuda:0  optjit CUDA emulator' ||
  { echo "not under the CUDA emulator"; exit 1; }
"$optjit" synth --preset mlp --steps 3 --params p.safetensors --grads g.safetensors

# Every tensor of two optjit outputs, byte for byte (the header's metadata names the backend).
same_tensors() {
  python3 - "$1" "$2" <<'EOF'
import json, struct, sys
def tensors(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    d = b[8 + n:]
    return {k: (v["dtype"], v["shape"], d[v["data_offsets"][0]:v["data_offsets"][1]])
            for k, v in h.items() if k != "__metadata__"}
a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
differ = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
if differ:
    sys.exit(f"{sys.argv[1]} and {sys.argv[2]} differ in {', '.join(differ)}")
print(f"{len(a)} tensors bit for bit")
EOF
}

for format in 8bit 4bit f8; do
  p="chain(clip_grad_norm(max_norm=1.0), adamw(lr=1e-2, weight_decay=0.1, state_format=\"$format\"))"
  for backend in cpu cuda; do
    "$optjit" run "$p" --params p.safetensors --grads g.safetensors --steps 3 \
      --out "$format.$backend.safetensors" --backend "$backend" > /dev/null
  done
  echo -n "$format: "
  same_tensors "$format.cpu.safetensors" "$format.cuda.safetensors"
done

# --chunk alone keeps the rest of the default launch for the pipeline (quantized state: vectors
# of 4, two trips staged, interleaved on the emulator's sm_90), and a chunk that vectors of 4 do
# not divide gives them up; either way the CPU's bytes.
p='chain(clip_grad_norm(max_norm=1.0), adamw(lr=1e-2, weight_decay=0.1, state_format="8bit"))'
for chunk in 4096:vec=4 1001:vec=1; do
  "$optjit" run "$p" --params p.safetensors --grads g.safetensors --steps 3 --backend cuda \
    --chunk "${chunk%%:*}" --out "chunk.cuda.safetensors" > run.log
  grep -q "^launch parameters: block=256,items=1,${chunk#*:},grid=8,chunk=${chunk%%:*}" run.log ||
    { echo "--chunk ${chunk%%:*} ran with another launch:"; cat run.log; exit 1; }
  [ "${chunk#*:}" = vec=1 ] || grep -q ",interleave=1,stage=2$" run.log ||
    { echo "--chunk ${chunk%%:*} dropped the default's options:"; cat run.log; exit 1; }
  echo -n "8bit, --chunk ${chunk%%:*}: "
  same_tensors 8bit.cpu.safetensors chunk.cuda.safetensors
done

# A tuning decision on the device, then a bench that takes it (without one, --launch tuned is an
# error), with the winner's launch.
p='chain(clip_grad_norm(max_norm=1.0), adamw(lr=1e-3, weight_decay=0.01, state_format="4bit"))'
export OPTJIT_CACHE_DIR=$dir/cache
if "$optjit" bench "$p" --backend cuda --numel 65536 --launch tuned > /dev/null 2>&1; then
  echo "--launch tuned ran before any tuning"
  exit 1
fi
winner=$("$optjit" tune "$p" --backend cuda --numel 65536 --budget-seconds 5 --max-candidates 3 |
  sed -n 's/^tuned .* candidates .*: //p')
[ -n "$winner" ] || { echo "optjit tune named no winner"; exit 1; }
"$optjit" bench "$p" --backend cuda --numel 65536 --steps 2 --reps 1 --launch tuned --no-unfused |
  grep -F "cuda on optjit CUDA emulator: $winner," ||
  { echo "bench --launch tuned did not take the tuned launch ($winner)"; exit 1; }
