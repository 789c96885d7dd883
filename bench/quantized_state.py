#!/usr/bin/env python3
"""8-bit and 4-bit optimizer state: optjit against its own f32 state and against bitsandbytes and torch,
in one process, timed in alternation (the machines are shared and noisy: only ratios from one
run mean anything).

AdamW with the clip fused (optjit.torch.AdamW(..., max_grad_norm=1.0)) on one tensor of
--numel parameters, with state_format="8bit" (bitsandbytes' blockwise), "f8" (torchao's fp8), "4bit" (torchao's
AdamW4bit) and with f32 state; torch.optim.AdamW(fused=True)
after clip_grad_norm_; bitsandbytes.optim.AdamW8bit and torchao.optim.AdamW8bit and AdamW4bit after
clip_grad_norm_ (written in torch ops, compiled by torch.compile for torchao), and the same
bitsandbytes code with its import changed to optjit.bitsandbytes. With --numel, on one
tensor, the peers timed at --bnb-numel, smaller, and scaled per parameter; with --shapes (a
model's tensors, bench/shapes.py), every optimizer on the same tensors.
Also the state memory each keeps per parameter.

    PYTHONPATH=build/python python3 bench/quantized_state.py --numel 67108864 --threads 2
    PYTHONPATH=build/python python3 bench/quantized_state.py --shapes gpt2-small --threads 2
    PYTHONPATH=build/python python3 bench/quantized_state.py --device cuda --numel 268435456

With --device cuda everything runs on the GPU (bitsandbytes' CUDA kernels, at the full size),
each timing ends with torch.cuda.synchronize().
"""
import argparse
import statistics
import time

import torch

import optjit.torch as ot
from shapes import shapes as model_shapes


def make_params(kinds, seed=0, device="cpu"):
    """Each kind's parameters and gradients, {kind: [params]}, allocated a tensor of each kind at
    a time: on a 2-core Xeon VM the tensors allocated first stepped slowest (the same f32 AdamW
    on three copies of gpt2-small: 129, 119 and 103 ms/step in the order they were allocated;
    123, 122 and 123 allocated this way), which made whichever kind came first look slow."""
    gens = {k: torch.Generator().manual_seed(seed) for k in kinds}
    out = {k: [] for k in kinds}
    for i in range(max(len(ss) for ss in kinds.values())):
        for k, ss in kinds.items():
            if i < len(ss):
                p = torch.nn.Parameter((torch.randn(*ss[i], generator=gens[k]) * 0.1).to(device))
                p.grad = (torch.randn(*ss[i], generator=gens[k]) * 1e-3).to(device)
                out[k].append(p)
    return out


def make(ps, kind):
    n = sum(p.numel() for p in ps)
    p = ps  # every optimizer takes the list
    kw = dict(lr=1e-3, weight_decay=0.01)
    if kind == "optjit 8bit":
        opt = ot.AdamW(p, max_grad_norm=1.0, state_format="8bit", **kw)
    elif kind == "optjit f8":
        opt = ot.AdamW(p, max_grad_norm=1.0, state_format="f8", **kw)
    elif kind == "optjit 4bit":
        opt = ot.AdamW(p, max_grad_norm=1.0, state_format="4bit", **kw)
    elif kind == "optjit f32":
        opt = ot.AdamW(p, max_grad_norm=1.0, **kw)
    elif kind == "torch fused":
        inner = torch.optim.AdamW(p, fused=True, **kw)
        opt = _Clipped(inner, p)
    elif kind == "optjit.bitsandbytes AdamW8bit":  # bitsandbytes' class, one import changed
        import optjit.bitsandbytes as obnb
        opt = _Clipped(obnb.optim.AdamW8bit(p, **kw), p)
    elif kind == "torchao AdamW4bit":
        import torchao.optim as tao
        opt = _Clipped(tao.AdamW4bit(p, **kw), p)
    elif kind == "torchao AdamW8bit":
        import torchao.optim as tao
        opt = _Clipped(tao.AdamW8bit(p, **kw), p)
    else:
        import bitsandbytes as bnb
        opt = _Clipped(bnb.optim.AdamW8bit(p, **kw), p)
    opt.step()
    states = opt.state if hasattr(opt, "state") else opt.inner.state
    nbytes = sum(_nbytes(t) for q in p for t in states[q].values()
                 if isinstance(t, torch.Tensor) and t.numel() > 1)
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
    ap.add_argument("--numel", type=int, default=None, help="one tensor (default 2^26)")
    ap.add_argument("--shapes", default=None, help="a model's tensors: gpt2-small, resnet50, ...")
    ap.add_argument("--bnb-numel", type=int, default=1 << 22)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--no-bnb", action="store_true")
    ap.add_argument("--no-torchao", action="store_true")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    gpu = a.device != "cpu"
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    if a.shapes:
        model = model_shapes(a.shapes, None)
        peer = model
    else:
        model = [[a.numel or 1 << 26]]
        peer = model if gpu else [[a.bnb_numel]]  # the peers' CPU steps are slow
    count = lambda ss: sum(torch.Size(s).numel() for s in ss)  # noqa: E731
    total = count(model)
    kinds = {"optjit 8bit": model, "optjit f8": model, "optjit 4bit": model,
             "optjit f32": model, "torch fused": model}
    if not a.no_bnb:
        kinds["bnb AdamW8bit"] = peer
        # The same code with `import optjit.bitsandbytes as bnb`: bitsandbytes' class and
        # torch's clip_grad_norm_, on the peer's tensors.
        kinds["optjit.bitsandbytes AdamW8bit"] = peer
    if not a.no_torchao:
        kinds["torchao AdamW8bit"] = peer
        kinds["torchao AdamW4bit"] = peer
    params = make_params(kinds, device=a.device)
    runs = {k: make(params[k], k) for k in kinds}
    times = {k: [] for k in kinds}
    order = list(runs.items())
    for r in range(a.reps):
        # Each round starts at the next kind, so that no kind always steps straight after the
        # peers' long steps: on the Xeon VM of 2026-11-30 the first step after bitsandbytes'
        # took up to 2.7x the next ones (bench/results/cpu-2026-11-30-prefetch.md, section 5).
        for k, (opt, _) in order[r % len(order):] + order[:r % len(order)]:
            sync()
            t0 = time.perf_counter()
            for _ in range(a.steps):
                opt.step()
            sync()
            times[k].append((time.perf_counter() - t0) / a.steps / count(kinds[k]))
    base = statistics.median(times["optjit f32"])
    torch_fused = statistics.median(times["torch fused"])
    what = a.shapes or f"one tensor of {total}"
    where = torch.cuda.get_device_name() if gpu else f"{a.threads} threads"
    print(f"{what}: {total} parameters in {len(model)} tensors, {where}, "
          f"median of {a.reps} x {a.steps} steps")
    for k, t in times.items():
        m = statistics.median(t)
        print(f"{k:30s} {m * total * 1e3:9.2f} ms/step  state {runs[k][1]:5.2f} B/param  "
              f"speed {base / m:5.2f}x optjit's f32 state, {torch_fused / m:5.2f}x torch fused")


if __name__ == "__main__":
    main()
