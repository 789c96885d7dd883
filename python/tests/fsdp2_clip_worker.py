"""One process of test_deferred_clip.py's FSDP2 test (torch.distributed.run, 2 processes, gloo):
a model sharded by fully_shard, stepped by optjit.torch.AdamW after torch's clip_grad_norm_ and,
on a copy, after optjit.torch.clip_grad_norm_ (the scaling deferred into the step, each process
scaling its local shards by torch's replicated norm). Writes, per process, what the test
asserts, as JSON to argv[1].rank<r>."""
import warnings

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

import optjit.torch as ot

import distributed_run

warnings.simplefilter("ignore")


def run(clip, state_format):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 16))
    fully_shard(m)
    opt = ot.AdamW(m.parameters(), lr=1e-2, state_format=state_format)
    norms = []
    for k in range(4):
        g = torch.Generator().manual_seed(100 + k)  # (the same batch on every process)
        opt.zero_grad()
        (m(torch.randn(8, 64, generator=g)) * 20).square().mean().backward()
        norms.append(clip(m.parameters(), 0.5).full_tensor().item())
        opt.step()
    return m, opt, norms


def main():
    dist.init_process_group("gloo")
    out = {}
    for state_format in (None, "8bit"):
        theirs, _, their_norms = run(torch.nn.utils.clip_grad_norm_, state_format)
        ours, opt, our_norms = run(ot.clip_grad_norm_, state_format)
        local = [(p.to_local(), q.to_local()) for p, q in zip(theirs.parameters(),
                                                              ours.parameters())]
        out[str(state_format)] = {
            "deferred": "optjit_deferred_clip" in opt.pipeline,
            "same_norms": their_norms == our_norms,
            "clipped": min(their_norms) > 0.5,  # (every step clips)
            "same_shards": [torch.equal(a, b) for a, b in local],
            "apart": max((a - b).abs().max().item() for a, b in local),
        }
    return out


if __name__ == "__main__":
    distributed_run.finish(main())
