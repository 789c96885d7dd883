"""A sharded optjit.torch step whose peer process dies (test_sharded.py runs two of these):
rank 1 exits after the first step; rank 0's second step must fail with one line from the
communicator, its parameters and state untouched. Rank 0 writes what it saw to argv[1]."""
import datetime
import json
import os
import sys

import torch
import torch.distributed as dist

import optjit.torch as ot

rank = int(os.environ["RANK"])
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=20))
torch.manual_seed(0)
params = [torch.nn.Parameter(torch.randn(64, 64)) for _ in range(4)]
mine = params[rank::2]
opt = ot.AdamW(mine, lr=0.1, max_grad_norm=1.0, process_group=dist.group.WORLD)
for p in mine:
    p.grad = torch.randn_like(p)
opt.step()
if rank == 1:
    os._exit(3)  # dies between steps, as a killed or crashed process does
before = [p.detach().clone() for p in mine]
state = [{k: v.clone() for k, v in opt.state[p].items()} for p in mine]
try:
    opt.step()
    error = None
except Exception as e:  # noqa: BLE001 (what it raises is what is checked)
    error = f"{type(e).__name__}: {e}"
with open(sys.argv[1], "w") as f:
    json.dump({"error": error,
               "params_unchanged": all(torch.equal(a, b) for a, b in zip(before, mine)),
               "state_unchanged": all(torch.equal(v, opt.state[p][k])
                                      for p, st in zip(mine, state) for k, v in st.items())}, f)
os._exit(0)  # (no teardown with a dead peer)
