#!/usr/bin/env python3
"""The example optimizers written in the text form (examples/pipelines) against their authors'
packages, on the same tensors on the CPU, timed in alternation in one process (these machines
are shared and noisy: a ratio from one run, not absolute times): Schedule-Free AdamW against
schedulefree.AdamWScheduleFree (foreach), Prodigy against prodigyopt.Prodigy, Lookahead around
AdamW against torch_optimizer.Lookahead(torch.optim.AdamW(foreach=True)), MADGRAD against
torch_optimizer.MADGRAD. Prints each one's
median step time and the peer's over optjit's.

    PYTHONPATH=build/python python3 bench/custom_optimizers.py [--numel N] [--tensors T]
"""
import argparse
import pathlib
import statistics
import time
import warnings

import torch

import optjit.torch as ot

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples/pipelines"


def peers():
    out = {}
    try:
        import schedulefree

        def sf(ps):
            o = schedulefree.AdamWScheduleFree(ps, lr=0.0025, foreach=True)
            o.train()
            return o
        out["schedule_free"] = sf
    except ImportError:
        pass
    try:
        import prodigyopt
        out["prodigy"] = lambda ps: prodigyopt.Prodigy(ps, lr=1.0, weight_decay=0.01)
    except ImportError:
        pass
    try:
        import torch_optimizer
        out["lookahead"] = lambda ps: torch_optimizer.Lookahead(
            torch.optim.AdamW(ps, lr=1e-3, weight_decay=0.01, foreach=True), k=5, alpha=0.5)
        out["madgrad"] = lambda ps: torch_optimizer.MADGRAD(ps, lr=1e-2)
    except ImportError:
        pass
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--numel", type=int, default=1 << 24, help="parameters in all")
    ap.add_argument("--tensors", type=int, default=16)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    torch.set_num_threads(2)
    torch.manual_seed(0)
    each = a.numel // a.tensors
    for name, make_peer in peers().items():
        path = str(EXAMPLES / f"{name}.opt")
        sets = {}
        for who in ("optjit", "peer"):
            ps = [torch.nn.Parameter(torch.randn(each)) for _ in range(a.tensors)]
            for p in ps:
                p.grad = torch.randn(each) * 1e-3
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                opt = ot.Optimizer(ps, path) if who == "optjit" else make_peer(ps)
                opt.step()  # compiles, makes state
            sets[who] = opt
        times = {"optjit": [], "peer": []}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(a.rounds):
                for who in ("optjit", "peer"):
                    t0 = time.perf_counter()
                    for _ in range(a.steps):
                        sets[who].step()
                    times[who].append((time.perf_counter() - t0) / a.steps)
        ours, theirs = statistics.median(times["optjit"]), statistics.median(times["peer"])
        print(f"{name:14s} optjit {ours * 1e3:8.2f} ms/step   peer {theirs * 1e3:8.2f} ms/step"
              f"   peer/optjit {theirs / ours:5.2f}x   ({a.tensors} tensors, {a.numel} parameters)")


if __name__ == "__main__":
    main()
