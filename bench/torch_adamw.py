#!/usr/bin/env python3
"""PyTorch's best path for clip + AdamW on the same shapes as `optjit bench`, and the ratio.

Runs torch.nn.utils.clip_grad_norm_(foreach=True) then torch.optim.AdamW(fused=True) on this
CPU (or on the GPU with --device cuda), then `optjit bench --json` on the same shapes and
device, and prints both step times and optjit's speedup. On a GPU both are also put against the
device's copy bandwidth, which optjit bench measures (cuMemcpyDtoD of the same bytes).
Needs: pip install torch numpy (a CUDA build of torch for --device cuda).

    python3 bench/torch_adamw.py --optjit build/optjit --shapes gpt2-small --threads 2
    python3 bench/torch_adamw.py --optjit build/optjit --device cuda --numel 1000000000
"""
import argparse
import json
import statistics
import subprocess
import sys
import time

import torch

from shapes import shapes

PIPELINE = "chain(clip_grad_norm(max_norm=1.0), adamw(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01))"


def torch_step_seconds(shape_list, steps, reps, device):
    params = [torch.nn.Parameter(torch.randn(s, device=device) * 0.1) for s in shape_list]
    for p in params:
        p.grad = torch.randn_like(p) * 1e-3
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    opt = torch.optim.AdamW(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, fused=True)

    def step():
        torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
        opt.step()

    for _ in range(2):
        step()
    sync()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        sync()
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
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--launch", default="", help="optjit bench --launch for cuda (e.g. tuned)")
    ap.add_argument("--step", default="", help="optjit bench --step (host, device, graph)")
    ap.add_argument("--rounds", type=int, default=2, help="alternating torch/optjit rounds")
    a = ap.parse_args()
    if a.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: this torch build sees no CUDA GPU")
    torch.set_num_threads(a.threads)
    shape_list = shapes(a.shapes, a.numel)
    cmd = [a.optjit, "bench", PIPELINE, "--steps", str(a.steps), "--reps", str(a.reps), "--json", "--no-unfused"]
    cmd += ["--backend", "cuda"] if a.device == "cuda" else ["--threads", str(a.threads)]
    if a.launch:
        cmd += ["--launch", a.launch]
    if a.step:
        cmd += ["--step", a.step]
    cmd += ["--numel", str(a.numel)] if a.numel else ["--shapes", a.shapes]

    def optjit_bench():
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            # optjit's own message, not a Python traceback that hides it.
            raise SystemExit(f"optjit bench failed (exit {p.returncode}): {p.stderr.strip() or p.stdout.strip()}\n  command: {' '.join(cmd)}")
        return json.loads(p.stdout)

    # torch and optjit alternate, so drift on a shared machine hits both alike; each round's
    # ratio is printed, and the median ratio is the result.
    ratios, t_torch_all, t_opt_all = [], [], []
    for k in range(a.rounds):
        t_torch = torch_step_seconds(shape_list, a.steps, a.reps, a.device)
        if a.device == "cuda":
            torch.cuda.empty_cache()  # give optjit the memory back
        r = optjit_bench()
        t_opt = r["step_seconds"]
        t_torch_all.append(t_torch)
        t_opt_all.append(t_opt)
        ratios.append(t_torch / t_opt)
        print(f"round {k + 1}: torch {1e3 * t_torch:9.3f} ms/step, optjit {1e3 * t_opt:9.3f} ms/step, ratio {t_torch / t_opt:.3f}", flush=True)
    t_torch, t_opt = statistics.median(t_torch_all), statistics.median(t_opt_all)
    n = r["parameters"]
    where = torch.cuda.get_device_name() if a.device == "cuda" else f"{a.threads} threads"
    print(f"shapes {a.shapes if not a.numel else a.numel}: {len(shape_list)} tensors, {n} parameters, {where}, torch {torch.__version__}")
    print(f"torch clip_grad_norm_(foreach=True) + AdamW(fused=True): {1e3 * t_torch:9.3f} ms/step")
    print(f"optjit {PIPELINE} (launch {r.get('launch', '-')}, step {r.get('step', 'host')}): {1e3 * t_opt:9.3f} ms/step ({r['fraction_of_roofline']:.3f} of its roofline)")
    if "copy_gbs" in r:
        # optjit moves bytes_per_param per parameter; torch's foreach norm + fused AdamW moves 4 + 28.
        copy = r["copy_gbs"]
        print(f"device copy bandwidth {copy:.1f} GB/s: optjit {r['effective_gbs'] / copy:.3f} of it, "
              f"torch {(32 * n / t_torch / 1e9) / copy:.3f} of it (at 32 B/param)")
    print(f"optjit is {statistics.median(ratios):.2f}x faster (median of {a.rounds} alternating rounds: {', '.join(f'{x:.2f}' for x in ratios)})")


if __name__ == "__main__":
    sys.exit(main())
