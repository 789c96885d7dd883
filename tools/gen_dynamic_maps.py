#!/usr/bin/env python3
"""Prints bitsandbytes' two dynamic quantization maps as C++ hex-float initialisers.

bitsandbytes builds them at run time (functional.create_dynamic_map) from torch.linspace in
float32, whose rounding depends on torch's kernels; optjit keeps the 256 values of each as data
(ir/quant.cpp). tests/torch/test_quantized_state.py checks them bit for bit against the
installed bitsandbytes."""
import bitsandbytes.functional as F

for signed in (True, False):
    values = F.create_dynamic_map(signed=signed).tolist()
    assert len(values) == 256
    name = "kDynamicSigned" if signed else "kDynamicUnsigned"
    print(f"constexpr std::array<float, 256> {name} = {{")
    for i in range(0, 256, 4):
        print("    " + ", ".join(f"{float(v).hex()}f" for v in values[i:i + 4]) + ",")
    print("};")
