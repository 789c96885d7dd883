"""Which call of a sharded optjit.torch step over a NCCL process group waits for the GPU.

On an H200 (2026-11-26) such a step returned only after the GPU had run it (0.30 s behind a
0.3 s torch.cuda._sleep), while the unsharded step and the C++ NCCL communicator's device step
return at once (#13). The cause found afterwards, without a GPU: the step's communicator (torch's
NCCL through the bridge) did not say that it only enqueues, so the sharded step ran on the host
(Communicator::enqueues, shard_test's ACommunicatorThatOnlyEnqueuesStepsOnTheDevice). This times
each layer on its own, with the GPU kept busy, in one process with a one-rank NCCL group, to
confirm it there:

    python3 tools/gpu/queue_waits.py        (device_run.sh's python stage runs it)

Confirmed on the H200's next run the same day: the sharded step returned at once after its first
(bench/results/h200-2026-11-26b/python.log).

Each line is the seconds a call took to return; a call that is only queued takes well under
0.1 s, one that waits for the GPU about 0.3 s.
"""
import os
import tempfile
import time

import torch
import torch.distributed as dist

import optjit.torch as ot
from optjit.torch import _CudaArray

DEV = torch.device("cuda", 0)


def returns_in(fn):
    torch.cuda.synchronize()
    clock = getattr(torch.cuda.get_device_properties(DEV), "clock_rate", 2_000_000)
    torch.cuda._sleep(int(clock * 300))
    t0 = time.perf_counter()
    fn()
    waited = time.perf_counter() - t0
    torch.cuda.synchronize()
    return waited


def main():
    torch.cuda.set_device(DEV)
    store = dist.FileStore(os.path.join(tempfile.mkdtemp(), "store"), 1)
    dist.init_process_group("nccl", store=store, rank=0, world_size=1)
    try:
        plain = torch.ones(64, dtype=torch.float64, device=DEV)
        dist.all_reduce(plain)  # (the communicator is made here)
        cai = torch.as_tensor(_CudaArray(plain.data_ptr(), 64), device=DEV)
        for what, fn in (
                ("all_reduce, a torch tensor", lambda: dist.all_reduce(plain)),
                ("all_reduce, a __cuda_array_interface__", lambda: dist.all_reduce(cai)),
                ("as_tensor of a __cuda_array_interface__",
                 lambda: torch.as_tensor(_CudaArray(plain.data_ptr(), 64), device=DEV))):
            print(f"{what:42s} {returns_in(fn):.3f} s")
        shapes = [(5, 3), (7,), (), (0,), (2, 3, 4), (1000, 257)]
        for name, kw in (("unsharded", {}), ("sharded", {"process_group": dist.group.WORLD})):
            ps = [torch.nn.Parameter(torch.randn(s, device=DEV)) for s in shapes]
            opt = ot.LAMB(ps, lr=1e-2, max_grad_norm=1.0, **kw)
            for p in ps:
                p.grad = torch.randn_like(p)
            times = [returns_in(opt.step) for _ in range(4)]
            print(f"{'LAMB step, ' + name:42s} {' '.join(f'{t:.3f}' for t in times)} s")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
