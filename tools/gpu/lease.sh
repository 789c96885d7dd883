#!/usr/bin/env bash
# One device-tool call's worth of tools/gpu/device_run.sh: stages given as NAME:SECONDS, each
# run under its own time limit (so one that hangs leaves time for the next), their logs packed
# after each stage into $OUT/logs.tgz (the device tool brings back at most 8 files), and the
# last 2,500 characters of each printed. The bundle (tools/gpu/pack.sh) travels in .gpu:
#   run(command="bash tools/gpu/lease.sh smoke:110 tests:160 python:170 webgpu:90",
#       carry=[".gpu"])
# A failed smoke stage stops the rest.
set -u
cd "$(dirname "$0")/../.."
back=${OUT:-.}
logs=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
for s in "$@"; do
  name=${s%:*}
  limit=${s#*:}
  OUT=$logs timeout -k 5 "$limit" bash tools/gpu/device_run.sh "$name" >"$logs/$name.console" 2>&1
  rc=$?
  echo "#### $name rc=$rc"
  tail -c 2500 "$logs/$name.console"
  tar czf "$back/logs.tgz" -C "$logs" . 2>/dev/null
  [ "$name" = smoke ] && [ "$rc" -ne 0 ] && break
done
exit 0
