#!/usr/bin/env python3
"""How planning and compiling time grow with the size of a pipeline.

For each family of generated pipelines (a chain of n clips, a chain of n Adams, a transform
with n states, a transform with n statements) and each size, times `optjit plan` (front end
and planner) and `optjit run --steps 1 --no-cache` on a 1,000-element tensor (everything, LLVM
compile included), and prints the growth exponent between sizes: log(t2/t1) / log(n2/n1), so
1 is linear and 2 quadratic. Each time is the best of --reps runs (the machine is shared).
Sizes beyond optjit's documented limits (ir/plan.h: 64 passes, 256 buffers) are errors, which
the last row of a family shows.

    python3 bench/scaling.py --optjit build/optjit
"""
import argparse
import math
import os
import subprocess
import tempfile
import time

FAMILIES = {
    # passes grow with n: one level of global reduction per clip
    "clip chain": ([8, 16, 32, 63, 64],
                   lambda n: "chain(" + "clip_grad_norm(max_norm=1.0), " * n + "sgd(lr=0.1))"),
    # buffers grow with n: two state buffers per adam
    "adam chain": ([16, 32, 64, 127, 128],
                   lambda n: "chain(" + ", ".join(["adam(lr=0.001)"] * n) + ")"),
    "states": ([32, 64, 128, 254, 255],
               lambda n: "transform many(lr=0.001) {\n" + "".join(
                   f"  state s{i} = 0\n  s{i} = 0.9 * s{i} + grad\n" for i in range(n))
               + "  param = param - lr * s0\n}\nmany()\n"),
    # one buffer, a long body
    "statements": ([2500, 5000, 10000, 20000],
                   lambda n: "transform big(lr=0.001) {\n  state x = 0\n" + "".join(
                       f"  x = x + {i % 7 + 1} * grad\n" for i in range(n))
                   + "  param = param - lr * x\n}\nbig()\n"),
}


def best_time(cmd, reps):
    best, out = math.inf, None
    for _ in range(reps):
        t0 = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True)
        best = min(best, time.perf_counter() - t0)
        out = r
    return best, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--optjit", default="build/optjit")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--family", action="append", help="only these (default: all)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        p, g = os.path.join(d, "p.st"), os.path.join(d, "g.st")
        subprocess.run([a.optjit, "synth", "--preset", "one", "--numel", "1000", "--params", p,
                        "--grads", g], check=True, capture_output=True)
        print(f"{'family':<12} {'n':>6} {'plan s':>8} {'growth':>7} {'run s':>8} {'growth':>7}  result")
        for name, (sizes, make) in FAMILIES.items():
            if a.family and name not in a.family:
                continue
            prev = None
            for n in sizes:
                f = os.path.join(d, "pipe.opt")
                with open(f, "w") as fh:
                    fh.write(make(n))
                tp, rp = best_time([a.optjit, "plan", f, "--no-bodies"], a.reps)
                tr, rr = best_time([a.optjit, "run", f, "--backend", "cpu", "--no-cache",
                                    "--params", p, "--grads", g, "--steps", "1",
                                    "--out", os.path.join(d, "o.st")], a.reps)
                if rr.returncode != 0:
                    print(f"{name:<12} {n:>6} {tp:>8.3f} {'':>7} {tr:>8.3f} {'':>7}  "
                          f"{rr.stderr.strip()[:110]}")
                    continue
                result = next((l for l in rp.stdout.splitlines() if l.startswith("plan:")), "")
                gp = gr = ""
                if prev:
                    k = math.log(n / prev[0])
                    gp = f"{math.log(max(tp, 1e-3) / max(prev[1], 1e-3)) / k:.2f}"
                    gr = f"{math.log(tr / prev[2]) / k:.2f}"
                print(f"{name:<12} {n:>6} {tp:>8.3f} {gp:>7} {tr:>8.3f} {gr:>7}  {result}")
                prev = (n, tp, tr)


if __name__ == "__main__":
    main()
