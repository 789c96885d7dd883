"""How many of optjit's float32 parameters are bit for bit their peers' own, per optimizer.

    PYTHONPATH=build/python python3 bench/torch_bits.py [--steps 20] [--numel 65541]

Then the same for optjit.bitsandbytes' drop-ins against bitsandbytes' own classes (8-bit and
32-bit state, parameters and 8-bit codes).

Each optimizer steps the same random parameters with the same random gradients in optjit
(the CPU backend) and in its peer (torch.optim on the CPU, lion_pytorch, torch_optimizer,
bitsandbytes' AdEMAMix), and the script prints the share of elements that are equal to the bit
after the last step and the largest distance in ulps. torch's own bits depend on the CPU kernels
it picked: with AVX2 or AVX-512 its add(x, alpha=a), addcmul and lerp are fused multiply-adds,
with ATEN_CPU_CAPABILITY=default they are not (the script prints which it ran).
"""
import argparse
import math

import numpy as np
import torch

import optjit.torch as ot


def peers():
    yield "SGD", dict(lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01), torch.optim.SGD
    yield "SGD-nesterov", dict(lr=0.1, momentum=0.9, nesterov=True), torch.optim.SGD
    yield "Adam", dict(lr=1e-2, weight_decay=0.01), torch.optim.Adam
    yield "Adam-amsgrad", dict(lr=1e-2, amsgrad=True), torch.optim.Adam
    yield "AdamW", dict(lr=1e-2, weight_decay=0.1), torch.optim.AdamW
    yield "Adamax", dict(lr=1e-2, weight_decay=0.01), torch.optim.Adamax
    yield "NAdam", dict(lr=1e-2, weight_decay=0.01), torch.optim.NAdam
    yield "NAdam-decoupled", dict(lr=1e-2, weight_decay=0.01, decoupled_weight_decay=True), \
        torch.optim.NAdam
    yield "RAdam", dict(lr=1e-2, weight_decay=0.01), torch.optim.RAdam
    yield "RMSprop", dict(lr=1e-2, weight_decay=0.01), torch.optim.RMSprop
    yield "RMSprop-centered-momentum", dict(lr=1e-2, centered=True, momentum=0.9), \
        torch.optim.RMSprop
    yield "Adagrad", dict(lr=1e-1, lr_decay=0.01, weight_decay=0.01), torch.optim.Adagrad
    yield "Adadelta", dict(lr=1.0, weight_decay=0.01), torch.optim.Adadelta
    yield "Rprop", dict(lr=1e-2), torch.optim.Rprop
    yield "ASGD", dict(lr=1e-2, t0=3), torch.optim.ASGD
    try:
        import lion_pytorch
        yield "Lion", dict(lr=1e-3, weight_decay=0.1), lion_pytorch.Lion
    except ImportError:
        pass
    try:
        import torch_optimizer
        yield "LAMB", dict(lr=1e-2, weight_decay=0.01), torch_optimizer.Lamb
    except ImportError:
        pass


def ulps(a, b):
    ia = a.view(torch.int32).to(torch.int64)
    ib = b.view(torch.int32).to(torch.int64)
    ia = torch.where(ia < 0, -(ia & 0x7FFFFFFF), ia)
    ib = torch.where(ib < 0, -(ib & 0x7FFFFFFF), ib)
    return (ia - ib).abs()


def run(name, kw, peer, steps, numel):
    g = torch.Generator().manual_seed(1)
    p0 = torch.randn(numel, generator=g)
    grads = [torch.randn(numel, generator=g) * 0.1 for _ in range(steps)]
    a = torch.nn.Parameter(p0.clone())
    b = torch.nn.Parameter(p0.clone())
    oa = getattr(ot, name.split("-")[0])([a], backend="cpu", **kw)
    ob = peer([b], **kw)
    for gr in grads:
        a.grad = gr.clone()
        b.grad = gr.clone()
        oa.step()
        ob.step()
    eq = (a.detach().view(torch.int32) == b.detach().view(torch.int32)).double().mean().item()
    return eq, ulps(a.detach(), b.detach()).max().item()


BNB = [("AdamW8bit", dict(lr=1e-2)), ("AdamW32bit", dict(lr=1e-2)),
       ("Adam8bit", dict(lr=1e-2, weight_decay=0.1)),
       ("Lion8bit", dict(lr=1e-3, weight_decay=0.1)), ("Lion32bit", dict(lr=1e-3)),
       ("RMSprop8bit", dict(lr=1e-3, weight_decay=0.01)), ("RMSprop32bit", dict(lr=1e-3)),
       ("SGD8bit", dict(lr=1e-2, momentum=0.9)), ("SGD32bit", dict(lr=1e-2, momentum=0.9)),
       ("Adagrad8bit", dict(lr=1e-2)), ("Adagrad32bit", dict(lr=1e-2)),
       ("AdEMAMix8bit", dict(lr=1e-2)), ("AdEMAMix", dict(lr=1e-2, optim_bits=32))]


def run_bnb(name, kw, steps, numel):
    import warnings

    import bitsandbytes as bnb
    import optjit.bitsandbytes as obnb
    g = torch.Generator().manual_seed(1)
    p0 = torch.randn(numel, generator=g)
    grads = [torch.randn(numel, generator=g) * 0.1 for _ in range(steps)]
    a = torch.nn.Parameter(p0.clone())
    b = torch.nn.Parameter(p0.clone())
    oa = getattr(obnb.optim, name)([a], **kw)
    ob = getattr(bnb.optim, name)([b], **kw)
    for gr in grads:
        a.grad = gr.clone()
        b.grad = gr.clone()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            oa.step()
            ob.step()
    eq = (a.detach().view(torch.int32) == b.detach().view(torch.int32)).double().mean().item()
    theirs = ob.state[b]
    mine = oa.state_dict()["state"][0].get("__bnb_optimizer_quant_state__", {})
    same_codes = None
    if theirs["state1"].dtype == torch.uint8:
        same_codes = min((theirs[k] == mine[k]).double().mean().item()
                         for k in ("state1", "state2", "absmax1", "absmax2") if k in theirs)
    return eq, ulps(a.detach(), b.detach()).max().item(), same_codes


def correctly_rounded_sqrt():
    """Replaces torch.Tensor.sqrt and sqrt_ (for float32 tensors) by square roots rounded
    correctly (in float64, rounded once to float32: exact for square roots), as optjit's are."""
    plain, inplace = torch.Tensor.sqrt, torch.Tensor.sqrt_

    def sqrt(self):
        if self.dtype != torch.float32:
            return plain(self)
        return plain(self.double()).float()

    def sqrt_(self):
        if self.dtype != torch.float32:
            return inplace(self)
        return self.copy_(sqrt(self))

    torch.Tensor.sqrt, torch.Tensor.sqrt_ = sqrt, sqrt_


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--numel", type=int, default=65541)
    ap.add_argument("--exact-sqrt", action="store_true",
                    help="the peers' float32 square roots rounded correctly (torch's CPU sqrt "
                         "is not: 80%% of random inputs, the rest an ulp off)")
    args = ap.parse_args()
    if args.exact_sqrt:
        correctly_rounded_sqrt()
    print(f"torch {torch.__version__}, CPU kernels {torch.backends.cpu.get_cpu_capability()}, "
          f"{'correctly rounded' if args.exact_sqrt else 'its own'} sqrt, "
          f"{args.steps} steps of {args.numel} parameters")
    print(f"{'optimizer':28s} {'bit-equal':>10s} {'max ulps':>9s}")
    for name, kw, peer in peers():
        eq, mu = run(name, kw, peer, args.steps, args.numel)
        print(f"{name:28s} {100 * eq:9.3f}% {mu:9d}")
    try:
        import bitsandbytes  # noqa: F401
    except ImportError:
        return
    print(f"\n{'bitsandbytes':28s} {'bit-equal':>10s} {'max ulps':>9s} "
          f"{'codes, absmax equal':>20s}")
    for name, kw in BNB:
        eq, mu, codes = run_bnb(name, kw, args.steps, args.numel)
        c = "" if codes is None else f"{100 * codes:19.3f}%"
        print(f"{name:28s} {100 * eq:9.3f}% {mu:9d} {c}")


if __name__ == "__main__":
    main()
