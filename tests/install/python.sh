#!/usr/bin/env bash
# Installs the Python package as a wheel lays it out (cmake --install --component python) and
# imports it from there alone: the module, liboptjit beside it, the Python files. Usage:
# python.sh BUILD_DIR WORK_DIR PYTHON
set -euo pipefail
build=$1 work=$2 python=$3
rm -rf "$work" && mkdir -p "$work"
cmake --install "$build" --component python --prefix "$work/site" > "$work/install.log"
# Exactly what a wheel holds, once each.
ls "$work/site/optjit" | sed 's/\.cpython-.*\.so$/.EXT.so/' | sort > "$work/files"
printf '%s\n' __init__.py _optjit.EXT.so bitsandbytes.py liboptjit.so.0.1 torch.py torchao.py webgpu.py | diff - "$work/files"
cd "$work"
env -u PYTHONPATH -u LD_LIBRARY_PATH OPTJIT_CACHE_DIR="$work/cache" "$python" - "$work/site" <<'PY'
import sys
site = sys.argv[1]
sys.path.insert(0, site)
import numpy as np
import optjit
assert optjit.__file__.startswith(site), optjit.__file__
p = np.zeros(4, np.float32)
e = optjit.Engine("sgd(lr=0.5)", ["w"], [p])
e.step([np.ones(4, np.float32)])
assert (p == -0.5).all(), p
loaded = [line.split()[-1] for line in open("/proc/self/maps") if "liboptjit" in line]
assert loaded and all(path.startswith(site) for path in loaded), loaded
print("python package: ok,", sorted(set(loaded))[0])
PY
