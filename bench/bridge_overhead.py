#!/usr/bin/env python3
"""optjit.torch's own cost per step, where it is all there is: N one-element parameters
(clip + AdamW on the CPU), so the step is the Python layer, the binding and the engine's fixed
cost. Timed against the engine's step on the same gradients handed over as optjit.torch hands
them (DLPack capsules), and as plain tensors through __dlpack__ (what the binding costs that
way). Medians of 5 rounds in one process.

    PYTHONPATH=build/python python3 bench/bridge_overhead.py 148 1000 10000
"""
import statistics
import sys
import time

import torch
from torch.utils.dlpack import to_dlpack

import optjit.torch as ot


def timed(f, n):
    rounds = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            f()
        rounds.append((time.perf_counter() - t0) / n)
    return statistics.median(rounds)


def main():
    torch.set_num_threads(2)
    for count in [int(a) for a in sys.argv[1:]] or [148, 1000, 10000]:
        ps = [torch.nn.Parameter(torch.randn(1)) for _ in range(count)]
        for p in ps:
            p.grad = torch.randn(1)
        opt = ot.AdamW(ps, lr=1e-3, max_grad_norm=1.0)
        for _ in range(20):  # compiles, binds
            opt.step()
        eng = opt._last[0].engine
        grads = [p.grad for p in ps]
        n = max(20, 300000 // count)
        bridge = timed(opt.step, n)
        capsules = timed(lambda: eng.step([to_dlpack(g) for g in grads]), n)
        tensors = timed(lambda: eng.step(grads), n)
        print(f"{count:6d} one-element tensors: optjit.torch {1e6 * bridge:9.1f} us/step, "
              f"engine (capsules) {1e6 * capsules:9.1f}, engine (tensors, __dlpack__) "
              f"{1e6 * tensors:9.1f}; optjit.torch's Python layer {1e6 * (bridge - capsules):8.1f}")


if __name__ == "__main__":
    main()
