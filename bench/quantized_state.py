#!/usr/bin/env python3
"""8-bit and 4-bit optimizer state: optjit against its own f32 state and against bitsandbytes and torch,
in one process, timed in alternation (the machines are shared and noisy: only ratios from one
run mean anything).

AdamW with the clip fused (optjit.torch.AdamW(..., max_grad_norm=1.0)) on one tensor of
--numel parameters, with state_format="8bit" (bitsandbytes' blockwise), "f8" (torchao's fp8), "4bit" (torchao's
AdamW4bit) and with f32 state; torch.optim.AdamW(fused=True)
after clip_grad_norm_; bitsandbytes.optim.AdamW8bit and torchao.optim.AdamW4bit after clip_grad_norm_ (written in
torch ops, compiled by torch.compile for torchao: timed at --bnb-numel, smaller, and scaled per
parameter).
Also the state memory each keeps per parameter.

    PYTHONPATH=build/python python3 bench/quantized_state.py --numel 67108864 --threads 2
"""
import argparse
import statistics
import time

import torch

import optjit.torch as ot


def make(n, kind, seed=0):
    g = torch.Generator().manual_seed(seed)
    p = torch.nn.Parameter(torch.randn(n, generator=g) * 0.1)
    p.grad = torch.randn(n, generator=g) * 1e-3
    kw = dict(lr=1e-3, weight_decay=0.01)
    if kind == "optjit 8bit":
        opt = ot.AdamW([p], max_grad_norm=1.0, state_format="8bit", **kw)
    elif kind == "optjit f8":
        opt = ot.AdamW([p], max_grad_norm=1.0, state_format="f8", **kw)
    elif kind == "optjit 4bit":
        opt = ot.AdamW([p], max_grad_norm=1.0, state_format="4bit", **kw)
    elif kind == "optjit f32":
        opt = ot.AdamW([p], max_grad_norm=1.0, **kw)
    elif kind == "torch fused":
        inner = torch.optim.AdamW([p], fused=True, **kw)
        opt = _Clipped(inner, [p])
    elif kind == "torchao AdamW4bit":
        import torchao.optim as tao
        opt = _Clipped(tao.AdamW4bit([p], **kw), [p])
    else:
        import bitsandbytes as bnb
        opt = _Clipped(bnb.optim.AdamW8bit([p], **kw), [p])
    opt.step()
    state = opt.state[p] if hasattr(opt, "state") else opt.inner.state[p]
    nbytes = sum(_nbytes(t) for t in state.values() if isinstance(t, torch.Tensor) and t.numel() > 1)
    return opt, nbytes / n


def _nbytes(t):
    if hasattr(t, "codes") and hasattr(t, "scale"):  # torchao's quantized state subclasses
        return t.codes.numel() * t.codes.element_size() + t.scale.numel() * t.scale.element_size()
    return t.numel() * t.element_size()


class _Clipped:
    def __init__(self, inner, params):
        self.inner, self.params = inner, params

    def step(self):
        torch.nn.utils.clip_grad_norm_(self.params, 1.0, foreach=True)
        self.inner.step()

    @property
    def state(self):
        return self.inner.state


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--numel", type=int, default=1 << 26)
    ap.add_argument("--bnb-numel", type=int, default=1 << 22)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--no-bnb", action="store_true")
    ap.add_argument("--no-torchao", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    kinds = {"optjit 8bit": a.numel, "optjit f8": a.numel, "optjit 4bit": a.numel,
             "optjit f32": a.numel, "torch fused": a.numel}
    if not a.no_bnb:
        kinds["bnb AdamW8bit"] = a.bnb_numel
    if not a.no_torchao:
        kinds["torchao AdamW4bit"] = a.bnb_numel
    runs = {k: make(n, k) for k, n in kinds.items()}
    times = {k: [] for k in kinds}
    for _ in range(a.reps):
        for k, (opt, _) in runs.items():
            t0 = time.perf_counter()
            for _ in range(a.steps):
                opt.step()
            times[k].append((time.perf_counter() - t0) / a.steps / kinds[k])
    base = statistics.median(times["optjit f32"])
    print(f"{a.numel} parameters, {a.threads} threads, median of {a.reps} x {a.steps} steps")
    for k, t in times.items():
        m = statistics.median(t)
        print(f"{k:17s} {m * a.numel * 1e3:9.2f} ms/step at {a.numel}  "
              f"state {runs[k][1]:5.2f} B/param  speed {base / m:5.2f}x optjit's f32 state")


if __name__ == "__main__":
    main()
