#!/usr/bin/env python3
"""What a model of many tensors pays once: building the optimizer, its first step (engine,
state tensors in optimizer.state, bindings), its second, and a step after every parameter's
memory was replaced (p.data = p.data.clone(), as a reload with assign=True does: optjit
rebinds them all), for optjit.torch.AdamW and torch.optim.AdamW(fused=True). Each measurement in a fresh process (a first step happens once
per process), the two alternated, `rounds` times; medians.

    PYTHONPATH=build/python python3 bench/first_step.py 10000 [rounds]
"""
import statistics
import subprocess
import sys

ONE = r"""
import sys, time, torch
import optjit.torch as ot
n, which = int(sys.argv[1]), sys.argv[2]
torch.manual_seed(0)
ps = [torch.nn.Parameter(torch.randn(64)) for _ in range(n)]
for p in ps:
    p.grad = torch.randn(64)
t0 = time.perf_counter()
opt = (ot.AdamW(ps, lr=1e-3) if which == "optjit.torch"
       else torch.optim.AdamW(ps, lr=1e-3, fused=True))
t1 = time.perf_counter()
opt.step()
t2 = time.perf_counter()
opt.step()
t3 = time.perf_counter()
with torch.no_grad():
    for p in ps:
        p.data = p.data.clone()
t4 = time.perf_counter()
opt.step()
t5 = time.perf_counter()
print(t1 - t0, t2 - t1, t3 - t2, t5 - t4)
"""


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10000
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    times = {"optjit.torch": [], "torch fused": []}
    for _ in range(rounds):
        for which in times:
            out = subprocess.run([sys.executable, "-c", ONE, str(n), which], check=True,
                                 capture_output=True, text=True).stdout.split()
            times[which].append([float(x) for x in out])
    print(f"{n} tensors of 64 elements, AdamW, CPU; medians of {rounds} processes each")
    for which, t in times.items():
        create, first, second, moved = (statistics.median(x[i] for x in t) for i in range(4))
        print(f"  {which:13s} create {create * 1e3:7.1f} ms  first step {first * 1e3:7.1f} ms"
              f"  second {second * 1e3:6.2f} ms  after moving every parameter {moved * 1e3:7.1f} ms")


if __name__ == "__main__":
    main()
