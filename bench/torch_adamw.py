#!/usr/bin/env python3
"""PyTorch's best CPU path for clip + AdamW on the same shapes as `optjit bench`, and the ratio.

Runs torch.nn.utils.clip_grad_norm_(foreach=True) then torch.optim.AdamW(fused=True) on this
CPU, then `optjit bench --json` on the same shapes and threads, and prints both step times and
optjit's speedup. Needs: pip install torch numpy.

    python3 bench/torch_adamw.py --optjit build/optjit --shapes gpt2-small --threads 2
"""
import argparse
import json
import statistics
import subprocess
import sys
import time

import torch

PIPELINE = "chain(clip_grad_norm(max_norm=1.0), adamw(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01))"


def shapes(preset, numel):
    if numel:
        return [[numel]]
    if preset == "gpt2-small":
        d, vocab, ctx = 768, 50257, 1024
        s = [[vocab, d], [ctx, d]]
        for _ in range(12):
            s += [[d], [d], [d, 3 * d], [3 * d], [d, d], [d], [d], [d], [d, 4 * d], [4 * d], [4 * d, d], [d]]
        return s + [[d], [d]]
    if preset == "many-small":
        return [[1000]] * 10000
    if preset == "resnet50":
        s = [[64, 3, 7, 7], [64], [64]]
        cin = 64
        for layer, blocks in enumerate([3, 4, 6, 3]):
            w = 64 << layer
            for b in range(blocks):
                s += [[w, cin, 1, 1], [w], [w], [w, w, 3, 3], [w], [w], [4 * w, w, 1, 1], [4 * w], [4 * w]]
                if b == 0:
                    s += [[4 * w, cin, 1, 1], [4 * w], [4 * w]]
                cin = 4 * w
        return s + [[1000, 2048], [1000]]
    raise SystemExit(f"unknown preset {preset}")


def torch_step_seconds(shape_list, steps, reps):
    params = [torch.nn.Parameter(torch.randn(s) * 0.1) for s in shape_list]
    for p in params:
        p.grad = torch.randn_like(p) * 1e-3
    opt = torch.optim.AdamW(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, fused=True)

    def step():
        torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
        opt.step()

    for _ in range(2):
        step()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        times.append((time.perf_counter() - t0) / steps)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--optjit", default="build/optjit")
    ap.add_argument("--shapes", default="gpt2-small")
    ap.add_argument("--numel", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    shape_list = shapes(a.shapes, a.numel)
    t_torch = torch_step_seconds(shape_list, a.steps, a.reps)
    cmd = [a.optjit, "bench", PIPELINE, "--threads", str(a.threads), "--steps", str(a.steps), "--reps", str(a.reps),
           "--json", "--no-unfused"]
    cmd += ["--numel", str(a.numel)] if a.numel else ["--shapes", a.shapes]
    r = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    t_opt = r["step_seconds"]
    n = sum(r for r in [r["parameters"]])
    print(f"shapes {a.shapes if not a.numel else a.numel}: {len(shape_list)} tensors, {n} parameters, {a.threads} threads, torch {torch.__version__}")
    print(f"torch clip_grad_norm_(foreach=True) + AdamW(fused=True): {1e3 * t_torch:9.3f} ms/step")
    print(f"optjit {PIPELINE}: {1e3 * t_opt:9.3f} ms/step ({r['fraction_of_roofline']:.3f} of its roofline)")
    print(f"optjit is {t_torch / t_opt:.2f}x faster")


if __name__ == "__main__":
    sys.exit(main())
