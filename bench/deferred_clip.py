#!/usr/bin/env python3
"""What clipping costs a training step that clips with torch's clip_grad_norm_ (as transformers'
Trainer does, through accelerate) and steps with optjit: torch's clip then the step, against
optjit.torch.clip_grad_norm_ (what install() puts in torch's place: torch's norm, the gradients
scaled inside the fused step) and against the clip fused into the step (max_grad_norm=). In one
process, timed in alternation (the machines are shared and noisy: only ratios from one run mean
anything), on a model's tensors (bench/shapes.py) with float32 and 8-bit AdamW state, the
parameters in float32 or (--dtype bfloat16) bf16: bf16 gradients are rounded to bf16 after the
scaling, by torch's clip and inside the deferred step alike.

    PYTHONPATH=build/python python3 bench/deferred_clip.py --shapes gpt2-small --threads 2
    PYTHONPATH=build/python python3 bench/deferred_clip.py --shapes gpt2-small --dtype bfloat16
    PYTHONPATH=build/python python3 bench/deferred_clip.py --shapes gpt2-small --device cuda

With --device cuda each timing ends with torch.cuda.synchronize().
"""
import argparse
import statistics
import time

import torch

import optjit.torch as ot
from shapes import shapes as model_shapes

WAYS = ("torch clip", "deferred clip", "fused clip")


def make(shapes, state_format, way, device, dtype):
    g = torch.Generator().manual_seed(0)
    ps = []
    for shape in shapes:
        p = torch.nn.Parameter((torch.randn(*shape, generator=g) * 0.1).to(device, dtype))
        p.grad = (torch.randn(*shape, generator=g) * 1e-3).to(device, dtype)
        ps.append(p)
    kw = dict(lr=1e-3, weight_decay=0.01, state_format=state_format)
    if way == "fused clip":
        return ot.AdamW(ps, max_grad_norm=1.0, **kw).step
    opt = ot.AdamW(ps, **kw)
    clip = torch.nn.utils.clip_grad_norm_ if way == "torch clip" else ot.clip_grad_norm_

    def step():
        clip(ps, 1.0)
        opt.step()
    return step


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="gpt2-small", help="a model's tensors (bench/shapes.py)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"),
                    help="the parameters' and gradients' dtype")
    a = ap.parse_args()
    dtype = getattr(torch, a.dtype)
    torch.set_num_threads(a.threads)
    gpu = a.device != "cpu"
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    shapes = model_shapes(a.shapes, None)
    runs = {}
    plain = "f32" if dtype == torch.float32 else "bf16"  # (state kept as the parameters are)
    for fmt in (None, "8bit"):
        for way in WAYS:
            runs[(fmt or plain, way)] = make(shapes, fmt, way, a.device, dtype)
    for step in runs.values():  # (compiled, state made)
        step()
    times = {k: [] for k in runs}
    for _ in range(a.reps):
        for k, step in runs.items():
            sync()
            t0 = time.perf_counter()
            for _ in range(a.steps):
                step()
            sync()
            times[k].append((time.perf_counter() - t0) / a.steps)
    n = sum(torch.Size(s).numel() for s in shapes)
    where = torch.cuda.get_device_name() if gpu else f"{a.threads} threads"
    print(f"{a.shapes}: {n} {a.dtype} parameters in {len(shapes)} tensors, {where}, "
          f"median of {a.reps} x {a.steps} steps; AdamW after clip_grad_norm_(max_norm=1.0)")
    for fmt in (plain, "8bit"):
        base = statistics.median(times[(fmt, "torch clip")])
        for way in WAYS:
            t = statistics.median(times[(fmt, way)])
            print(f"{fmt:5s} state, {way:14s} {t * 1e3:9.2f} ms/step  {base / t:5.2f}x torch's "
                  f"clip then the step")


if __name__ == "__main__":
    main()
