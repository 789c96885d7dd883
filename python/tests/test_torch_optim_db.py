"""optjit.torch on PyTorch's own optimizer test inputs: for every OptimizerInfo in torch's optim_db
whose optimizer optjit provides, every input its optim_inputs_func gives, against torch's
for-loop implementation (foreach=False), on tensors of several shapes including 0-d and empty
ones; its state_dict round trip; and its scheduler cases."""
import copy

import pytest
import torch
from torch.testing._internal.common_optimizers import optim_db

import optjit.torch as ot

SHAPES = [(10, 5), (10,), (), (0,), (3, 1, 4)]
# (optjit's own: optjit.torch.Adafactor and the like are torch's, found there with a warning)
PROVIDED = {info.optim_cls.__name__: info for info in optim_db
            if info.optim_cls.__name__ in ot.__all__}
CASES = [(name, k, inp) for name, info in sorted(PROVIDED.items())
         for k, inp in enumerate(info.optim_inputs_func(device="cpu"))]


def test_every_torch_optimizer_optjit_provides_is_covered():
    assert set(PROVIDED) == {"Adadelta", "Adagrad", "Adam", "Adamax", "AdamW", "ASGD", "NAdam",
                             "RAdam", "RMSprop", "Rprop", "SGD"}
    assert len(CASES) >= 60


def params(dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(s, dtype=torch.float64, generator=g).to(dtype))
            for s in SHAPES]


def set_grads(ps, step):
    g = torch.Generator().manual_seed(100 + step)
    for p in ps:
        p.grad = torch.randn(p.shape, dtype=torch.float64, generator=g).to(p.dtype)


def run(cls, kwargs, dtype, steps, schedulers=(), ps=None, opt=None):
    ps = ps if ps is not None else params(dtype)
    opt = opt if opt is not None else cls(ps, **kwargs)
    scheds = [s(opt) for s in schedulers]
    for k in range(steps):
        set_grads(ps, k)
        opt.step()
        for s in scheds:
            if isinstance(s, torch.optim.lr_scheduler.ReduceLROnPlateau):
                s.step(1.0)  # a loss that never improves: it lowers lr
            else:
                s.step()
    return ps, opt


def err(a, b):
    return max(((x.double() - y.double()).abs().max().item() if x.numel() else 0.0)
               for x, y in zip(a, b))


def kwargs_of(name, inp):
    kw = dict(inp.kwargs)
    kw.pop("foreach", None)
    kw.pop("differentiable", None)
    return kw


@pytest.mark.parametrize("name,k,inp", CASES, ids=[f"{n}-{k}-{i.desc}" for n, k, i in CASES])
def test_optim_db_input(name, k, inp):
    torch_cls, ours = getattr(torch.optim, name), getattr(ot, name)
    kw = kwargs_of(name, inp)
    t64, _ = run(torch_cls, dict(kw, foreach=False), torch.float64, 6)
    o64, _ = run(ours, kw, torch.float64, 6)
    scale = max(1.0, max((x.abs().max().item() if x.numel() else 0) for x in t64))
    assert err(t64, o64) <= 1e-9 * scale
    t32, _ = run(torch_cls, dict(kw, foreach=False), torch.float32, 6)
    o32, _ = run(ours, kw, torch.float32, 6)
    assert err(o32, t64) <= 1.5 * err(t32, t64) + 1e-7 * scale


@pytest.mark.parametrize("name", sorted(PROVIDED))
def test_optim_db_state_dict_round_trip(name):
    """torch's optimizer for 3 steps; its state_dict into optjit's for 3 more; that equals 6
    steps of torch's; and optjit's state_dict loads back into torch's."""
    torch_cls, ours = getattr(torch.optim, name), getattr(ot, name)
    kw = kwargs_of(name, PROVIDED[name].optim_inputs_func(device="cpu")[-1])
    full, _ = run(torch_cls, dict(kw, foreach=False), torch.float64, 6)
    a, ta = run(torch_cls, dict(kw, foreach=False), torch.float64, 3)
    b = [torch.nn.Parameter(p.detach().clone()) for p in a]
    ob = ours(b, **kw)
    ob.load_state_dict(copy.deepcopy(ta.state_dict()))
    for k in range(3, 6):
        set_grads(b, k)
        ob.step()
    assert err(full, b) <= 1e-9  # float64, as for the inputs above
    back = torch_cls([torch.nn.Parameter(p.detach().clone()) for p in b], **dict(kw, foreach=False))
    back.load_state_dict(copy.deepcopy(ob.state_dict()))
    assert set(back.state_dict()["state"][0]) >= {k for k in ta.state_dict()["state"][0]}


@pytest.mark.parametrize("name,s", [(n, s) for n in sorted(PROVIDED)
                                    for s in range(len(PROVIDED[n].scheduler_inputs))])
def test_optim_db_schedulers(name, s):
    torch_cls, ours = getattr(torch.optim, name), getattr(ot, name)
    schedulers = PROVIDED[name].scheduler_inputs[s]
    a, _ = run(torch_cls, {"foreach": False}, torch.float64, 6, schedulers)
    b, _ = run(ours, {}, torch.float64, 6, schedulers)
    assert err(a, b) <= 1e-9
