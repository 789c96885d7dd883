#!/usr/bin/env python3
"""optjit.torch against PyTorch's best step, in one process, timed in alternation.

For gpt2-small and resnet50 parameter shapes: ``optjit.torch.AdamW(..., max_grad_norm=1.0)``
(clipping fused into the step) against ``clip_grad_norm_(foreach=True)`` +
``torch.optim.AdamW(fused=True)``, and against ``torch.compile`` of that same step (its compile
time reported too). Also the bridge's own per-step cost: the Python layer and the binding, as
the optjit.torch step minus the C++ engine's step on the same tensors.

    PYTHONPATH=build/python python3 bench/torch_bridge.py --threads 2
    PYTHONPATH=build/python python3 bench/torch_bridge.py --device cuda
"""
import argparse
import statistics
import time

import torch
import torch.utils.dlpack

import optjit.torch as ot
from shapes import shapes


def model(preset, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    ps = [torch.nn.Parameter((torch.randn(s, generator=g) * 0.1).to(device)) for s in shapes(preset, 0)]
    for p in ps:
        p.grad = (torch.randn(p.shape, generator=g) * 1e-3).to(device)
    return ps


def timed(step, steps, sync):
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    return (time.perf_counter() - t0) / steps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", nargs="+", default=["gpt2-small", "resnet50"])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile step")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
    kw = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    for preset in a.shapes:
        tp, op = model(preset, a.device), model(preset, a.device)
        n = sum(p.numel() for p in tp)
        topt = torch.optim.AdamW(tp, **kw, fused=True)
        oopt = ot.AdamW(op, **kw, max_grad_norm=1.0)

        def torch_step():
            torch.nn.utils.clip_grad_norm_(tp, 1.0, foreach=True)
            topt.step()

        runners = {"torch fused": torch_step, "optjit.torch": oopt.step}
        compile_s = None
        if not a.no_compile:
            cp = model(preset, a.device)
            copt = torch.optim.AdamW(cp, **kw, foreach=True)
            # Each preset's step is compiled afresh: the same code object over other shapes would
            # be a recompile with dynamic shapes, which torch 2.11 fails on CUDA ("sources must
            # not be empty for symbol", H200, 2026-11-26), and would not time a first compile.
            torch._dynamo.reset()

            @torch.compile(fullgraph=False)
            def compiled_step():
                torch.nn.utils.clip_grad_norm_(cp, 1.0, foreach=True)
                copt.step()

            t0 = time.perf_counter()
            compiled_step()
            sync()
            compile_s = time.perf_counter() - t0
            runners["torch.compile"] = compiled_step
        for step in runners.values():  # warm up (optjit compiles its kernels here)
            step()
        sync()
        # The engine's step on the same gradients, handed over as optjit.torch hands them
        # (DLPack capsules): what optjit.torch's Python layer adds.
        eng = next(iter(oopt._engines.values())).engine
        grads = [p.grad.detach() for p in op]
        to_dlpack = torch.utils.dlpack.to_dlpack
        runners["optjit engine"] = lambda: eng.step([to_dlpack(g) for g in grads])
        times = {k: [] for k in runners}
        for _ in range(a.reps):
            for k, step in runners.items():
                times[k].append(timed(step, a.steps, sync))
        med = {k: statistics.median(v) for k, v in times.items()}
        print(f"{preset}: {len(tp)} tensors, {n} parameters, {a.device}"
              f"{f', {a.threads} threads' if a.device == 'cpu' else ''}, torch {torch.__version__}")
        for k, v in med.items():
            print(f"  {k:<14} {1e3 * v:9.3f} ms/step")
        print(f"  optjit.torch is {med['torch fused'] / med['optjit.torch']:.2f}x torch's fused "
              f"AdamW + foreach clipping")
        if compile_s is not None:
            print(f"  optjit.torch is {med['torch.compile'] / med['optjit.torch']:.2f}x torch.compile "
                  f"of the same step (which took {compile_s:.1f} s to compile)")
        bridge = max(0.0, med["optjit.torch"] - med["optjit engine"])
        print(f"  the bridge's own cost (optjit.torch's Python layer): {1e6 * bridge:.1f} us/step "
              f"= {100 * bridge / med['optjit.torch']:.2f}% of the step")


if __name__ == "__main__":
    main()
