"""One process of test_dropins.py's FSDP2 checkpoint test (torch.distributed.run, 2 processes,
gloo): a model sharded by fully_shard steps with optjit.torchao's AdamW8bit and with torchao's
own; each one's state dict (torch.save, torch.load) loads into the other on a
copy of the model. Writes, per process, what the test asserts, as JSON to argv[1].rank<r>."""
import io
import warnings

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

import torchao.optim as tao

import optjit.torch as ot
import optjit.torchao as otao

import distributed_run

warnings.simplefilter("ignore")
# 8-bit only: torchao 0.18's own AdamW4bit and AdamWFp8 fail under FSDP2 on the CPU (its
# compiled 4-bit step: "wrong number of dimensions"; fp8: no attribute 'qmap').
CODES = {"AdamW8bit": ("q8", "q8u")}


def model():
    torch.manual_seed(0)
    # The weights' rows hold whole blocks, so optjit quantizes them under FSDP2 (torch.py's
    # _BLOCK_ROWS) as torchao does; the biases keep plain state in both
    m = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.Linear(256, 64))
    fully_shard(m)
    return m


def steps(m, opt, first, count):
    for k in range(first, first + count):
        g = torch.Generator().manual_seed(100 + k)
        m(torch.randn(8, 256, generator=g)).square().mean().backward()
        opt.step()
        opt.zero_grad()


def saved(opt):
    buf = io.BytesIO()
    torch.save(opt.state_dict(), buf)
    buf.seek(0)
    return torch.load(buf, weights_only=False)  # (DTensors of torchao's subclasses)


def values(opt, p, name, fmt):
    """A state's local values as f32: torchao's (a DTensor over its subclass) by its own
    dequantize(), optjit's codes by optjit's."""
    t = opt.state[p][name]
    t = t.to_local() if isinstance(t, DTensor) else t
    if type(t) is not torch.Tensor:
        return t.dequantize().float().reshape(p.to_local().shape)
    if t.dtype == torch.uint8:
        scale = opt.state[p][name + ".absmax"]
        scale = scale.to_local() if isinstance(scale, DTensor) else scale
        return ot._dequantize(fmt, t, scale, p.to_local())
    return t.float()


def main():
    dist.init_process_group("gloo")
    out = {}
    for name, (signed, unsigned) in CODES.items():
        forms = {"exp_avg": signed, "exp_avg_sq": unsigned}
        make = {"drop-in": getattr(otao.optim, name), "torchao": getattr(tao, name)}
        for first, then in (("drop-in", "torchao"), ("torchao", "drop-in")):
            m = model()
            opt = make[first](m.parameters(), lr=1e-2)
            steps(m, opt, 0, 3)
            m2 = model()  # (FSDP2 refuses deepcopy)
            with torch.no_grad():
                for p, q in zip(m.parameters(), m2.parameters()):
                    q.copy_(p)
            opt2 = make[then](m2.parameters(), lr=1e-2)
            opt2.load_state_dict(saved(opt))
            case = f"{name} {first} -> {then}"
            res = out[case] = {"kinds": [], "same_values": [], "quantized": []}
            for p, q in zip(m.parameters(), m2.parameters()):
                st = opt2.state[q]["exp_avg"]
                local = st.to_local() if isinstance(st, DTensor) else st
                res["kinds"].append(type(local).__name__)
                res["quantized"].append(local.dtype == torch.uint8 or type(local) is not
                                        torch.Tensor)
                res["same_values"].append(all(
                    torch.equal(values(opt, p, n, f), values(opt2, q, n, f))
                    for n, f in forms.items()))
            steps(m, opt, 3, 2)
            steps(m2, opt2, 3, 2)
            res["after"] = [type(t).__name__ + "/" + str(t.dtype) for t in (
                (lambda t: t.to_local() if isinstance(t, DTensor) else t)(opt2.state[q]["exp_avg"])
                for q in m2.parameters())]
            res["apart"] = max((p.to_local() - q.to_local()).abs().max().item()
                               for p, q in zip(m.parameters(), m2.parameters()))
    return out


if __name__ == "__main__":
    distributed_run.finish(main())
