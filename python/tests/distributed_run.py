"""Runs a worker script of this directory under torch.distributed.run (gloo, on the CPU), as the
tests of sharded steps do: `run(worker, out)` gives the worker `out` as its argument (each
worker writes its results there, for the test to read) and fails the test with the end of the
processes' output if any of them fails."""
import os
import socket
import subprocess
import sys
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(worker: str, out: Path, processes: int = 2, timeout: int = 300) -> None:
    script = Path(__file__).resolve().parent / worker
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node",
                        str(processes), "--master_port", str(free_port()), str(script),
                        str(out)],
                       env=dict(os.environ, OMP_NUM_THREADS="1"), capture_output=True, text=True,
                       timeout=timeout)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
