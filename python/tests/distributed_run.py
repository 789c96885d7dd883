"""Runs a worker script of this directory under torch.distributed.run (gloo, on the CPU), as the
tests of sharded steps do: `run(worker, out)` gives the worker `out` as its argument (each
worker writes its results there, for the test to read) and fails the test with the end of the
processes' output if any of them fails; a worker ends with `finish()`."""
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


def finish(results=None) -> None:
    """Ends a worker: writes its results (where given: JSON, to argv[1] + ".rank<r>", as the
    tests read them), leaves the process group, and exits without Python's finalisation. With
    this torch, a gloo worker thread that drops the last reference to a finished collective's
    tensors takes the GIL to release their Python objects; when that is still pending as Python
    finalises (the collective completed within a few milliseconds of the end: FSDP2's last
    all-gather, clip_grad_norm_'s all-reduce before a fast step), the thread is ended inside a
    C++ destructor and the process aborts with "terminate called without an active exception"
    (pytorch/pytorch#190489; 4 runs in 26 of fsdp2_clip_worker.py here, seen in gdb: the gloo
    thread in take_gil from ~AsyncAllreduceWork while the main thread was in Py_FinalizeEx)."""
    import json

    import torch.distributed as dist
    if results is not None:
        with open(f"{sys.argv[1]}.rank{dist.get_rank()}", "w") as f:
            json.dump(results, f)
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
