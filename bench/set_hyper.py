#!/usr/bin/env python3
"""What setting a hyperparameter costs against a step, in one run: an optjit.Engine over N float32
parameters (AdamW, its state the engine's own), `set_hyper("lr", ...)` as a scheduler driven
from Python calls it before every step. Medians of 5 rounds. set_hyper copied the whole state
(78 ms a call at 16M parameters, seven steps' time) until 36d1d84; it is a few hundred
nanoseconds, whatever N.

    PYTHONPATH=build/python python3 bench/set_hyper.py 1048576 16777216
"""
import statistics
import sys
import time

import numpy as np

import optjit


def timed(f, n):
    rounds = []
    for _ in range(5):
        t0 = time.perf_counter()
        for i in range(n):
            f(i)
        rounds.append((time.perf_counter() - t0) / n)
    return statistics.median(rounds)


def main():
    for n in [int(a) for a in sys.argv[1:]] or [1 << 20, 1 << 24]:
        w = np.ones(n, np.float32)
        g = np.full(n, 0.5, np.float32)
        e = optjit.Engine("adamw(lr=1e-3, weight_decay=0.01)", ["w"], [w])
        e.step([g])  # (compiles; makes the state)
        hyper = timed(lambda i: e.set_hyper("lr", 1e-3 * (1 + i % 7)), 1000)
        step = timed(lambda i: e.step([g]), 5)
        print(f"{n:>10} parameters: set_hyper {hyper * 1e6:9.2f} us, step {step * 1e3:8.2f} ms, "
              f"set_hyper / step = {hyper / step:.2e}")


if __name__ == "__main__":
    main()
