"""optjit.torch against PyTorch itself: every built-in, param groups, schedulers, checkpoints,
skipped parameters, closures, fused clipping, mixed dtypes, and errors."""
import collections
import copy
import gc
import math
import pickle
import re
import types
import warnings
import weakref

import pytest
import torch

import optjit
import optjit.torch as ot

# name -> keyword sets to try (torch's signature; the same for both).
BUILTINS = {
    "SGD": [dict(lr=0.1), dict(lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01),
            dict(lr=0.05, momentum=0.9, nesterov=True, maximize=True)],
    "Adam": [dict(lr=1e-2), dict(lr=1e-2, amsgrad=True, weight_decay=0.1),
             dict(lr=1e-2, betas=(0.8, 0.9), maximize=True),
             dict(lr=1e-2, weight_decay=0.1, decoupled_weight_decay=True, amsgrad=True)],
    "AdamW": [dict(lr=1e-2), dict(lr=1e-2, amsgrad=True, weight_decay=0.2)],
    "Adamax": [dict(), dict(lr=1e-2, weight_decay=0.1)],
    "NAdam": [dict(), dict(lr=1e-2, weight_decay=0.1, decoupled_weight_decay=True,
                           momentum_decay=0.01)],
    "RAdam": [dict(), dict(lr=1e-2, weight_decay=0.1, decoupled_weight_decay=True)],
    "RMSprop": [dict(), dict(lr=1e-3, centered=True, momentum=0.5, weight_decay=0.1)],
    "Adagrad": [dict(), dict(lr=0.1, lr_decay=0.1, initial_accumulator_value=0.2,
                             weight_decay=0.1)],
    "Adadelta": [dict(), dict(lr=0.5, rho=0.8, weight_decay=0.1)],
    "Rprop": [dict(), dict(lr=0.02, etas=(0.4, 1.3), step_sizes=(1e-5, 1.0))],
    "ASGD": [dict(), dict(lr=0.02, t0=2, lambd=0.01, weight_decay=0.1)],
}

SHAPES = [(5, 3), (7,), (), (0,), (2, 3, 4)]


# These helpers take a device (python/tests_gpu runs the same cases on CUDA tensors).
def tensors(dtype, seed=0, device="cpu", shapes=SHAPES):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, dtype=torch.float64, generator=g).to(device=device, dtype=dtype)
            for s in shapes]


def grads_for(step, params, seed=1):
    g = torch.Generator().manual_seed(seed * 1000 + step)
    return [torch.randn(p.shape, dtype=torch.float64, generator=g).to(device=p.device,
                                                                     dtype=p.dtype)
            for p in params]


def run(make, dtype, steps=5, seed=0, device="cpu", shapes=SHAPES):
    params = [torch.nn.Parameter(t) for t in tensors(dtype, seed, device, shapes)]
    opt = make(params)
    for k in range(steps):
        for p, g in zip(params, grads_for(k, params)):
            p.grad = g
        opt.step()
    return params, opt


def max_err(a, b):
    return max(((x.double().cpu() - y.double().cpu()).abs().max().item() if x.numel() else 0.0)
               for x, y in zip(a, b))


@pytest.mark.parametrize("name,kw", [(n, k) for n, ks in BUILTINS.items() for k in ks],
                         ids=lambda v: v if isinstance(v, str) else ",".join(v))
def test_builtin_matches_torch(name, kw):
    torch_cls, ours = getattr(torch.optim, name), getattr(ot, name)
    tkw = dict(kw, foreach=False)
    # float64: the same arithmetic.
    t64, _ = run(lambda p: torch_cls(p, **tkw), torch.float64)
    o64, _ = run(lambda p: ours(p, **kw), torch.float64)
    scale = max(1.0, max((x.abs().max().item() if x.numel() else 0) for x in t64))
    assert max_err(t64, o64) <= 1e-9 * scale
    # float32: no less accurate than torch's own float32, both against float64.
    t32, _ = run(lambda p: torch_cls(p, **tkw), torch.float32)
    o32, _ = run(lambda p: ours(p, **kw), torch.float32)
    assert max_err(o32, t64) <= 1.5 * max_err(t32, t64) + 1e-7 * scale


@pytest.mark.parametrize("name,kw", [(n, k) for n, ks in BUILTINS.items() for k in ks],
                         ids=lambda v: v if isinstance(v, str) else ",".join(v))
def test_builtin_is_torchs_float32_bit_for_bit(name, kw, correctly_rounded_sqrt):
    """In float32 every built-in gives torch's own bits (parameters and states, 8 steps, with
    a tail that is not a whole vector): the same operations in the same order, rounded where
    torch rounds, with a fused multiply-add where torch's CPU kernels fuse one (before: 53-96%
    of parameters equal, bench/torch_bits.py), once torch's square roots are rounded correctly
    (conftest.py's fixture; the only difference left)."""
    shapes = [(3000,), (37, 11), ()]
    theirs, to = run(lambda p: getattr(torch.optim, name)(p, **dict(kw, foreach=False)),
                     torch.float32, steps=8, shapes=shapes)
    ours, oo = run(lambda p: getattr(ot, name)(p, backend="cpu", **kw), torch.float32,
                   steps=8, shapes=shapes)
    for p_t, p_o in zip(theirs, ours):
        assert torch.equal(p_o.detach().view(torch.int32), p_t.detach().view(torch.int32)), (
            p_o.shape, (p_o != p_t).double().mean().item())
        if p_t.dim() == 0:  # (its per-parameter states are 0-dim, as the step counts)
            continue
        for k, v in to.state[p_t].items():
            if torch.is_tensor(v) and v.shape == p_t.shape:
                assert torch.equal(oo.state[p_o][k].view(torch.int32), v.view(torch.int32)), k


def test_every_optimizer_of_torch_optim_is_found_under_optjit_torch():
    """`import optjit.torch as optim` in place of `import torch.optim as optim` keeps code
    running: each of torch.optim's optimizers is optjit's built-in or, where optjit has no fused
    step for it (Adafactor, LBFGS, ...), torch's own with a warning that says why; the
    schedulers are torch's. (Before, `from optjit.torch import Adafactor` was an ImportError
    and `optim.lr_scheduler` an AttributeError.)"""
    optimizers = [n for n in dir(torch.optim) if isinstance(getattr(torch.optim, n), type)
                  and issubclass(getattr(torch.optim, n), torch.optim.Optimizer)
                  and n != "Optimizer"]
    assert {"Adafactor", "LBFGS", "SparseAdam"} <= set(optimizers) - set(BUILTINS)
    for name in optimizers:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            found = getattr(ot, name)
        if name in BUILTINS:
            assert issubclass(found, ot.Optimizer) and not caught, name
        else:
            assert found is getattr(torch.optim, name), name
            assert [str(w.message).split(": ")[0] for w in caught] == [
                f"optjit.torch.{name} is torch.optim.{name} itself, unfused"], name
            assert caught[0].filename == __file__  # the warning points at the caller
    scope = {}
    with pytest.warns(UserWarning, match="Adafactor is torch.optim.Adafactor itself, unfused: "
                                         "its factored second moment"):
        exec("from optjit.torch import Adafactor, lr_scheduler", scope)
    assert scope["lr_scheduler"] is torch.optim.lr_scheduler
    assert ot.swa_utils is torch.optim.swa_utils
    with pytest.raises(AttributeError, match="module 'optjit.torch' has no attribute 'Adafactr'"):
        ot.Adafactr


@pytest.mark.parametrize("name", sorted(BUILTINS))
def test_every_keyword_of_torchs_optimizer_is_taken(name):
    """A drop-in takes every keyword the installed torch's optimizer takes, at torch's default
    (Adam's decoupled_weight_decay, added to torch.optim.Adam after optjit.torch.Adam was
    written, was a TypeError), and its groups hold torch's keys but the step options (the
    flags that choose the program, amsgrad, maximize, ..., were missing: group["maximize"] was
    a KeyError)."""
    import inspect
    p = [torch.nn.Parameter(torch.randn(4))]
    signature = inspect.signature(getattr(torch.optim, name)).parameters
    given = {k: v.default for k, v in signature.items()
             if k != "params" and v.default is not inspect.Parameter.empty}
    opt = getattr(ot, name)(p, **given)
    p[0].grad = torch.randn(4)
    opt.step()
    options = {"foreach", "fused", "capturable", "differentiable"}
    theirs = getattr(torch.optim, name)([torch.nn.Parameter(torch.randn(4))]).param_groups[0]
    assert set(theirs) - options <= set(opt.param_groups[0]), (
        set(theirs) - options - set(opt.param_groups[0]))
    assert all(opt.param_groups[0][k] == theirs[k] for k in set(theirs) - options - {"params"})


def test_state_dict_round_trips_with_torch_mid_training():
    # torch.optim.AdamW for 3 steps, its checkpoint into optjit's AdamW for 3 more, and back.
    kw = dict(lr=1e-2, weight_decay=0.1)
    ref, ref_opt = run(lambda p: torch.optim.AdamW(p, **kw, foreach=False), torch.float64, steps=3)
    a = [torch.nn.Parameter(t) for t in tensors(torch.float64)]
    a_opt = torch.optim.AdamW(a, **kw, foreach=False)
    for k in range(3):
        for p, g in zip(a, grads_for(k, a)):
            p.grad = g
        a_opt.step()
    b = [torch.nn.Parameter(p.detach().clone()) for p in a]
    b_opt = ot.AdamW(b, **kw)
    b_opt.load_state_dict(copy.deepcopy(a_opt.state_dict()))
    c = [torch.nn.Parameter(p.detach().clone()) for p in a]
    c_opt = torch.optim.AdamW(c, **kw, foreach=False)
    for k in range(3, 6):
        for opt, ps in ((a_opt, a), (b_opt, b)):
            for p, g in zip(ps, grads_for(k, ps)):
                p.grad = g
            opt.step()
        if k == 4:  # and back: optjit's checkpoint into torch's optimizer
            c_opt.load_state_dict(copy.deepcopy(b_opt.state_dict()))
            for p, q in zip(c, b):
                p.data.copy_(q.data)
        if k == 5:
            for p, g in zip(c, grads_for(k, c)):
                p.grad = g
            c_opt.step()
    assert max_err(a, b) <= 1e-12
    assert max_err(a, c) <= 1e-12
    sd = b_opt.state_dict()
    assert set(sd["state"][0]) == {"step", "exp_avg", "exp_avg_sq"}
    assert float(sd["state"][0]["step"]) == 6.0


def run_pair(make, steps):
    """torch's optimizer and optjit's, each made by make(cls, extra) -> (params, opt, sched),
    stepped on the same gradients; returns both parameter lists."""
    runs = [make(torch_cls, extra) for torch_cls, extra in make.classes]
    for k in range(steps):
        for ps, opt, sch in runs:
            for p, g in zip(ps, grads_for(k, ps)):
                p.grad = g
            opt.step()
            sch.step()
    return runs[0][0], runs[1][0]


def test_param_groups_and_schedulers():
    def make(opt_cls, extra):
        params = [torch.nn.Parameter(t) for t in tensors(torch.float64)]
        opt = opt_cls([{"params": params[:2]}, {"params": params[2:], "lr": 0.05,
                                                 "weight_decay": 0.0, "betas": (0.5, 0.6)}],
                      lr=1e-2, weight_decay=0.1, **extra)
        sched = torch.optim.lr_scheduler.ChainedScheduler([
            torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5),
            torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))])
        return params, opt, sched

    make.classes = [(torch.optim.AdamW, {"foreach": False}), (ot.AdamW, {})]
    a, b = run_pair(make, 6)
    assert max_err(a, b) <= 1e-12


def test_add_param_group_mid_training():
    a = [torch.nn.Parameter(t) for t in tensors(torch.float64)]
    b = [torch.nn.Parameter(t) for t in tensors(torch.float64)]
    ao = torch.optim.Adam(a[:3], lr=1e-2, foreach=False)
    bo = ot.Adam(b[:3], lr=1e-2)
    for k in range(5):
        if k == 2:  # a new group, with its own betas and learning rate
            ao.add_param_group({"params": a[3:], "betas": (0.5, 0.6), "lr": 0.02})
            bo.add_param_group({"params": b[3:], "betas": (0.5, 0.6), "lr": 0.02})
        for opt, ps in ((ao, a), (bo, b)):
            n = 3 if k < 2 else len(ps)
            for p, g in zip(ps[:n], grads_for(k, ps)[:n]):
                p.grad = g
            opt.step()
    assert max_err(a, b) <= 1e-12


@pytest.mark.parametrize("sched", ["onecycle", "cosine"])
def test_schedulers_write_lr_that_the_next_step_reads(sched):
    def make(opt_cls, extra):
        params = [torch.nn.Parameter(t) for t in tensors(torch.float64)]
        opt = opt_cls(params, lr=1e-2, **extra)
        if sched == "onecycle":
            s = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=10)
        else:
            s = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=4, eta_min=1e-3)
        return params, opt, s

    make.classes = [(torch.optim.Adam, {"foreach": False}), (ot.Adam, {})]
    a, b = run_pair(make, 8)
    assert max_err(a, b) <= 1e-12


def test_parameters_without_grad_are_skipped_and_grads_may_move():
    a = [torch.nn.Parameter(t) for t in tensors(torch.float64)]
    b = [torch.nn.Parameter(t) for t in tensors(torch.float64)]
    ao, bo = torch.optim.Adam(a, lr=0.1, foreach=False), ot.Adam(b, lr=0.1)
    for k in range(5):
        for opt, ps in ((ao, a), (bo, b)):
            opt.zero_grad(set_to_none=True)
            for i, (p, g) in enumerate(zip(ps, grads_for(k, ps))):
                if k in (1, 2) and i == 0:
                    continue  # no gradient: skipped, as torch skips it
                p.grad = g.clone()  # fresh memory every step
            opt.step()
    assert max_err(a, b) <= 1e-12
    assert float(bo.state[b[0]]["step"]) == 3.0 and float(bo.state[b[1]]["step"]) == 5.0


def test_closure_is_called_with_grad_enabled():
    w = torch.nn.Parameter(torch.tensor([1.0, -2.0], dtype=torch.float64))
    opt = ot.SGD([w], lr=0.1)

    def closure():
        opt.zero_grad()
        loss = (w ** 2).sum()
        loss.backward()
        return loss

    loss = opt.step(closure)
    assert loss.item() == 5.0
    assert w.tolist() == pytest.approx([0.8, -1.6], abs=1e-15)


def test_fused_clipping_equals_clip_grad_norm_then_adamw():
    check_fused_clipping()


def check_fused_clipping(device="cpu", shapes=SHAPES):
    a = [torch.nn.Parameter(t) for t in tensors(torch.float64, device=device, shapes=shapes)]
    b = [torch.nn.Parameter(t) for t in tensors(torch.float64, device=device, shapes=shapes)]
    ao = torch.optim.AdamW(a, lr=1e-2, foreach=False)
    bo = ot.AdamW(b, lr=1e-2, max_grad_norm=0.5)
    assert bo.pipeline.startswith("chain(clip_grad_norm(max_norm=0.5")
    for k in range(4):
        for p, g in zip(a, grads_for(k, a)):
            p.grad = 3 * g
        for p, g in zip(b, grads_for(k, b)):
            p.grad = 3 * g
        torch.nn.utils.clip_grad_norm_(a, 0.5, foreach=False)
        ao.step()
        bo.step()
    assert max_err(a, b) <= 1e-12


def test_mixed_dtypes_are_no_less_accurate_than_torch():
    check_mixed_dtypes()


def check_mixed_dtypes(device="cpu"):
    dtypes = [torch.float32, torch.bfloat16, torch.float16, torch.float32]

    def model(dt_list):
        return [torch.nn.Parameter(t.to(d))
                for t, d in zip(tensors(torch.float64, device=device)[:4], dt_list)]

    ref, ta, ours = model([torch.float64] * 4), model(dtypes), model(dtypes)
    ro = torch.optim.AdamW(ref, lr=1e-2, foreach=False)
    to = torch.optim.AdamW(ta, lr=1e-2, foreach=False)
    oo = ot.AdamW(ours, lr=1e-2, max_grad_norm=1.0)
    for k in range(4):
        gs = grads_for(k, ref)
        for ps in (ref, ta, ours):
            for p, g in zip(ps, gs):
                p.grad = g.to(p.dtype)
        torch.nn.utils.clip_grad_norm_(ref, 1.0)
        torch.nn.utils.clip_grad_norm_(ta, 1.0)
        ro.step(), to.step(), oo.step()
    for i in range(4):
        e_torch = max_err([ta[i]], [ref[i]])
        e_ours = max_err([ours[i]], [ref[i]])
        assert e_ours <= 1.5 * e_torch + 1e-6, (i, dtypes[i], e_ours, e_torch)


def test_grad_scaler_unscales_and_skips_inside_the_step():
    check_grad_scaler(torch.device("cpu"), torch.float64, SHAPES, 1e-12)


def check_grad_scaler(device, dtype, shapes, tolerance):
    """GradScaler with the clip fused: unscaling and the Inf skip inside the step, against
    torch's unscale_ + clip_grad_norm_ + AdamW (python/tests_gpu: on CUDA tensors)."""
    a = [torch.nn.Parameter(t) for t in tensors(dtype, 0, device, shapes)]
    b = [torch.nn.Parameter(t) for t in tensors(dtype, 0, device, shapes)]
    ao, bo = torch.optim.AdamW(a, lr=1e-2, foreach=False), ot.AdamW(b, lr=1e-2, max_grad_norm=1.0)
    sa = torch.amp.GradScaler(device.type, init_scale=1024.0, growth_interval=2)
    sb = torch.amp.GradScaler(device.type, init_scale=1024.0, growth_interval=2)
    for k in range(6):
        gs = grads_for(k, a)
        if k == 3:
            gs[1][0] = float("inf")  # an overflow: both skip this step
        before = [p.detach().clone() for p in b], copy.deepcopy(bo.state_dict())
        for ps, opt, sc in ((a, ao, sa), (b, bo, sb)):
            sc.scale(torch.ones((), dtype=dtype, device=device))  # as scaler.scale(loss) would
            for p, g in zip(ps, gs):
                p.grad = g * sc.get_scale()
            if opt is ao:
                sc.unscale_(opt)
                torch.nn.utils.clip_grad_norm_(a, 1.0)
            sc.step(opt)
            sc.update()
        if k == 3:
            assert all(torch.equal(x, y) for x, y in zip(before[0], b))
            after = bo.state_dict()["state"]
            for i, st in before[1]["state"].items():
                for name, t in st.items():
                    assert torch.equal(t, after[i][name]), (i, name)
        assert sa.get_scale() == sb.get_scale()
    assert bo.pipeline.startswith("chain(grad_scaler(")
    assert max_err(a, b) <= tolerance
    assert float(bo.state[b[0]]["step"]) == 5.0


def test_gradients_laid_out_unlike_their_parameter_are_copied_with_a_warning():
    """A gradient set by hand may be a transposed, sliced or expanded tensor (autograd gives a
    gradient its parameter's layout; a user's code need not). torch's step reads any layout:
    optjit's copies such a gradient into its parameter's layout (the low-level engine refuses
    it), warned once per parameter, and gives torch's results."""
    torch.manual_seed(3)
    shapes = [(4, 6), (5, 3, 2), (7,)]
    ref = [torch.nn.Parameter(torch.randn(*s, dtype=torch.float64)) for s in shapes]
    ours = [torch.nn.Parameter(p.detach().clone()) for p in ref]
    opt = ot.AdamW(ours, lr=0.1, weight_decay=0.1, max_grad_norm=1.0)
    torch_opt = torch.optim.AdamW(ref, lr=0.1, weight_decay=0.1, foreach=False)
    layouts = [
        lambda s: torch.randn(*reversed(s), dtype=torch.float64).permute(
            *reversed(range(len(s)))),  # dense, in the reverse order of dimensions
        lambda s: torch.randn(*s[:-1], 2 * s[-1], dtype=torch.float64)[..., ::2],  # a slice
        lambda s: torch.randn(s[-1], dtype=torch.float64).expand(*s),  # an expanded view
        lambda s: torch.randn(*s, dtype=torch.float64),  # row-major: as its parameter
    ]
    for k, layout in enumerate(layouts):
        grads = [layout(s) for s in shapes]
        for a, b, g in zip(ours, ref, grads):
            a.grad, b.grad = g, g.clone()
        torch.nn.utils.clip_grad_norm_(ref, 1.0)
        torch_opt.step()
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            opt.step()
        laid_out = [str(w.message) for w in seen if "laid out unlike" in str(w.message)]
        if k == 0:  # the 1-d parameter's "reversed" gradient is its own layout
            assert len(laid_out) == 2, laid_out
            assert laid_out[0] == ("optjit: the gradient of parameter 0 is laid out unlike its "
                                   "parameter (strides (1, 4) against (6, 1)): it is copied "
                                   "into the parameter's layout before each step")
        elif k == 1:  # now the 1-d one too; the others were warned of already
            assert len(laid_out) == 1 and "parameter 2 " in laid_out[0], laid_out
        else:
            assert laid_out == []
        for a, b in zip(ours, ref):
            torch.testing.assert_close(a.detach(), b.detach(), rtol=1e-12, atol=1e-12)
            torch.testing.assert_close(opt.state[a]["exp_avg_sq"], torch_opt.state[b]["exp_avg_sq"],
                                       rtol=1e-12, atol=1e-15)


def test_errors_are_clear():
    w = torch.nn.Parameter(torch.zeros(4, 4))
    opt = ot.AdamW([w])
    w.grad = torch.zeros(4, 4).to_sparse()
    with pytest.raises(optjit.Error, match="sparse gradient"):
        opt.step()
    with pytest.raises(TypeError, match="unexpected keyword argument 'betaz'"):
        ot.AdamW([w], betaz=(0.9, 0.9))
    with pytest.raises(optjit.Error, match="line 1, column 10: expected a number"):
        ot.Optimizer([w], "adamw(lr=")  # checked when it is built, not at the first step
    # So is the backend's name (it was taken, and refused only at the first step).
    with pytest.raises(ValueError, match=r"^backend: 'tpu' is not one of 'auto', 'reference', "
                                         r"'cpu', .*'webgpu'"):
        ot.AdamW([w], backend="tpu")
    assert set(optjit._optjit.backends()) >= {"auto", "reference", "cpu", "opencl", "cuda",
                                              "webgpu"}
    # The other options too, each by name (a shard order was checked only when sharding; a
    # cache flag that is not a bool failed inside the binding with its whole signature).
    with pytest.raises(ValueError, match=r"^shard_order: 'zigzag' is not 'by_tensor' or "
                                         r"'by_process'$"):
        ot.AdamW([w], shard_order="zigzag")
    with pytest.raises(TypeError, match=r"^cache takes True or False, not 'no'$"):
        ot.AdamW([w], cache="no")
    with pytest.raises(TypeError, match=r"^process_group takes a torch.distributed ProcessGroup, "
                                        r"not str$"):
        ot.AdamW([w], process_group="abc")
    # torch's for-loop step can be differentiated through; optjit's (as torch's fused) cannot:
    # refused, where ignoring it would silently cut the gradients of a meta-learning loop.
    with pytest.raises(optjit.Error, match=r"^AdamW\(differentiable=True\): optjit's fused step "
                                           r"is not differentiable"):
        ot.AdamW([w], differentiable=True)
    ot.AdamW([w], differentiable=False, foreach=True, fused=None, capturable=False)
    # A built-in's bad value is named without a place in pipeline text the caller never wrote.
    with pytest.raises(optjit.InvalidValue, match=r"^AdamW: transform 'adamw': lr = -1 is "
                                                  r"invalid: the learning rate must be in"):
        ot.AdamW([w], lr=-1.0)
    # So are other arguments that make bad pipeline text: betas of three numbers (which torch
    # takes, ignoring the third), an unknown state format.
    with pytest.raises(optjit.Error, match=r"^AdamW: transform 'adamw': 'betas' takes a tuple "
                                           r"of 2 numbers, got 3$"):
        ot.AdamW([w], betas=(0.9, 0.99, 0.9))
    with pytest.raises(optjit.Error, match=r"^Adam: transform 'adam': state_format: 'q9' is not "
                                           r"a format \(f32, bf16"):
        ot.Adam([w], state_format="q9")
    # A value that is not a number is named (float() reads the string "0.1", a TypeError from
    # deep inside named nothing); torch refuses both, as a TypeError from its comparisons.
    with pytest.raises(optjit.Error, match=r"^AdamW: lr is '0.1', not a number$"):
        ot.AdamW([w], lr="0.1")
    with pytest.raises(optjit.Error, match=r"^AdamW: lr is None, not a number$"):
        ot.AdamW([w], lr=None)
    with pytest.raises(optjit.Error, match=r"^AdamW: betas is '0.9', not a number$"):
        ot.AdamW([w], betas=("0.9", 0.999))
    with pytest.raises(optjit.Error, match=r"^AdamW: max_grad_norm is '1', not a number$"):
        ot.AdamW([w], max_grad_norm="1")
    # A tensor for the parameters is torch's TypeError (iterated, its rows were refused as
    # non-leaf tensors); a group's single tensor is a group of one, as in torch.
    for cls in (torch.optim.AdamW, ot.AdamW):
        with pytest.raises(TypeError, match=r"^params argument given to the optimizer should be "
                                            r"an iterable of Tensors or dicts, but got "
                                            r"torch.FloatTensor$"):
            cls(w)
    assert len(ot.AdamW([{"params": w}]).param_groups[0]["params"]) == 1


PROBES = [-1.0, 0.0, 1.0, 2.0, math.inf, math.nan]
UNCHECKED = {("SGD", "dampening"), ("ASGD", "t0"), ("Rprop", "step_sizes")}  # torch: any value


@pytest.mark.parametrize("name", sorted(BUILTINS))
def test_constructors_refuse_what_torchs_refuse_with_a_value_error(name):
    """Each hyperparameter of each built-in at each probe value: optjit raises ValueError
    (optjit.InvalidValue) exactly where torch's constructor does; and NaN wherever torch
    checks the value at all (its SGD compares `lr < 0.0`, which NaN passes)."""
    keys = sorted({k for kw in BUILTINS[name] for k, v in kw.items()
                   if not isinstance(v, bool)} | {"lr"})
    for key in keys:
        default = next((kw[key] for kw in BUILTINS[name] if key in kw), None)
        for v in PROBES:
            value = (v, default[1]) if isinstance(default, tuple) else v
            kw = {key: value}
            if name == "SGD" and key == "dampening":
                kw["momentum"] = 0.9
            try:
                getattr(torch.optim, name)([torch.nn.Parameter(torch.zeros(2))], **kw)
                torch_raises = False
            except ValueError:
                torch_raises = True
            w = torch.nn.Parameter(torch.zeros(2))
            try:
                getattr(ot, name)([w], **kw)
                ours = None
            except ValueError as e:
                ours = e
            expect = torch_raises or (math.isnan(v) and (name, key) not in UNCHECKED)
            assert (ours is not None) == expect, (name, kw, ours)
            if ours is not None:
                assert isinstance(ours, optjit.Error) and " is invalid: " in str(ours), ours
                assert key in str(ours), ours
    # Later, through the param groups (a scheduler writing lr), the same bounds hold.
    w = torch.nn.Parameter(torch.zeros(2))
    opt = getattr(ot, name)([w])
    opt.param_groups[0]["lr"] = -1.0
    w.grad = torch.ones(2)
    with pytest.raises(optjit.InvalidValue, match=r"\.lr = -1 is invalid: the learning rate"):
        opt.step()


def test_low_level_engine_steps_numpy_arrays_in_place():
    np = pytest.importorskip("numpy")
    w = np.linspace(-1, 1, 100).astype(np.float32)
    g = np.full(100, 0.5, np.float32)
    e = optjit.Engine("chain(clip_grad_norm(max_norm=1.0), sgd(lr=0.1))", ["w"], [w])
    assert (e.passes, e.bytes_per_param, e.backend) == (2, 16, "cpu")  # 4 B for the norm, 12 for SGD
    before = w.copy()
    assert e.step([g]) is False
    # |g| = 5, clipped to 1: every element moves by 0.1 * 0.5 / 5.
    assert np.allclose(before - w, 0.01, atol=1e-6)
    with pytest.raises(optjit.Error, match="got 2 gradients for 1 parameters"):
        e.step([g, g])
    # What is not a list of arrays is named (it was nanobind's TypeError listing signatures).
    with pytest.raises(optjit.Error, match=r"^the gradient of parameter 'w' is not an array "
                                           r"\(NumPy, PyTorch, CuPy, ... : DLPack or the buffer "
                                           r"protocol\), but a NoneType$"):
        e.step([None])
    with pytest.raises(optjit.Error, match=r"^the gradient of parameter 'w' is not an array .*"
                                           r"but a list$"):
        e.tune([[0.5] * 100], 0.1)
    # (NumPy's own words for an array it cannot export)
    with pytest.raises(optjit.Error, match=r"^the gradient of parameter 'w' cannot be read as an "
                                           r"array: .*byte order"):
        e.step([np.full(100, 0.5, ">f4")])
    with pytest.raises(optjit.Error, match=r"^step\(\) takes a list of gradient arrays \(one per "
                                           r"parameter, in order\), not int$"):
        e.step(5)
    with pytest.raises(optjit.Error, match="got 2 gradients for 1 parameters"):
        e.step([None, g])
    with pytest.raises(optjit.Error, match=r"^tune\(\) takes budget_seconds as a number of "
                                           r"seconds"):
        e.tune([g], "10")
    assert np.allclose(before - w, 0.01, atol=1e-6)  # (none of these stepped)
    # A one-value hyperparameter takes a number as it is (it took only a list of one); what is
    # not a number is named.
    e.set_hyper("sgd.lr", 0.25)
    assert e.hyper("sgd.lr") == 0.25
    # What nanobind converts to numbers is taken (a first version of these bindings took [1]
    # and tune's budget of 1 from the typed ones, only to refuse them).
    for value, want in [([1], 1.0), ([np.float32(0.5)], 0.5), (np.array([0.75]), 0.75),
                        (np.float64(0.125), 0.125), (2, 2.0)]:
        e.set_hyper("sgd.lr", value)
        assert e.hyper("sgd.lr") == want, value
    assert isinstance(e.tune([g], 1, 2), dict)
    e.set_hyper("sgd.lr", 0.25)
    with pytest.raises(optjit.Error, match=r"^set_hyper\('sgd.lr'\): values is a number or a list "
                                           r"of numbers \(betas: two\), not 'x'$"):
        e.set_hyper("sgd.lr", "x")
    with pytest.raises(optjit.Error, match=r"values is a number or a list of numbers \(betas: "
                                           r"two\), not None$"):
        e.set_hyper("sgd.lr", None)
    with pytest.raises(optjit.Error, match=r"^step\(\) takes a list of gradient arrays \(one per "
                                           r"parameter, in order\), not NoneType$"):
        e.step(None)
    assert e.hyper("sgd.lr") == 0.25


def test_pipeline_text_read_from_a_windows_file_steps(tmp_path):
    """A file a Windows editor saved starts with a UTF-8 byte order mark, which Python's
    open(path).read() keeps: that text was "unexpected byte 0xef"; given by its path, it read."""
    np = pytest.importorskip("numpy")
    path = tmp_path / "pipeline.txt"
    path.write_bytes(b"\xef\xbb\xbfchain(\r\n  clip_grad_norm(max_norm=1.0),\r\n"
                     b"  sgd(lr=0.1)\r\n)\r\n")
    text = open(path, encoding="utf-8").read()
    assert text.startswith("\ufeff")
    runs = []
    for pipeline in (text, str(path)):
        w = np.linspace(-1, 1, 100).astype(np.float32)
        optjit.Engine(pipeline, ["w"], [w]).step([np.full(100, 0.5, np.float32)])
        runs.append(w)
    assert np.array_equal(runs[0], runs[1])
    assert np.allclose(np.linspace(-1, 1, 100) - runs[0], 0.01, atol=1e-6)


def test_a_pipeline_file_given_by_its_path_steps_as_its_text(tmp_path):
    """optjit.torch.Optimizer given a pipeline file's path stepped its first step, but a
    deferred clip or a GradScaler chained their transforms to the file's *name* ("line 4,
    column 57: unexpected character '.'"): the text is read once, at construction. A
    pathlib.Path is taken wherever a path is (the pipeline, Engine.save and load: nanobind's
    TypeError before), and anything else is an error naming the argument."""
    import pathlib

    np = pytest.importorskip("numpy")
    path = tmp_path / "pipeline.txt"
    path.write_text("adamw(lr=0.1, weight_decay=0.01)\n")
    runs = []
    for pipeline in ("adamw(lr=0.1, weight_decay=0.01)", str(path), path):
        torch.manual_seed(0)
        model = torch.nn.Linear(6, 3)
        opt = ot.Optimizer(model.parameters(), pipeline)
        scaler = torch.amp.GradScaler("cpu", init_scale=4.0)
        for k in range(3):
            opt.zero_grad()
            scaler.scale(model(torch.randn(5, 6)).square().sum()).backward()
            if k == 2:  # (unscaled first, as before a clip of the true gradients)
                scaler.unscale_(opt)
            ot.clip_grad_norm_(model.parameters(), 0.5)
            scaler.step(opt)
            scaler.update()
        runs.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    assert torch.equal(runs[0], runs[1]) and torch.equal(runs[0], runs[2])
    w = np.ones(4, np.float32)
    eng = optjit.Engine(path, ["w"], [w])
    eng.step([np.ones(4, np.float32)])
    eng.save(tmp_path / "state.safetensors")
    again = optjit.Engine(str(path), ["w"], [np.ones(4, np.float32)])
    again.load(pathlib.PurePath(tmp_path / "state.safetensors").as_posix().encode())
    assert again.step_count == 1
    assert optjit.plan(path) == optjit.plan(path.read_text())
    with pytest.raises(optjit.Error, match=r"^pipeline is a str or an os.PathLike, not int$"):
        ot.Optimizer(model.parameters(), 5)
    with pytest.raises(optjit.Error, match=r"^save\(\): path is a str or an os.PathLike, not "
                                           r"NoneType$"):
        eng.save(None)


def test_an_engines_groups_are_one_index_per_parameter():
    """group_of gives every parameter its group, or is empty: a shorter list left the rest in
    group 0 and a negative index matched by name patterns, both silently."""
    np = pytest.importorskip("numpy")
    ws = [np.ones(4, np.float32), np.ones(3, np.float32)]
    with pytest.raises(optjit.Error, match=r"^group_of: 1 entries for 2 parameters \(one group "
                                           r"index each, or none: all in group 0\)$"):
        optjit.Engine("sgd(lr=0.1)", ["a", "b"], ws, group_of=[1], groups=2)
    with pytest.raises(optjit.Error, match=r"^group_of\[1\] is -1: a group index is 0 \(the "
                                           r"default\) or more$"):
        optjit.Engine("sgd(lr=0.1)", ["a", "b"], ws, group_of=[0, -1], groups=2)
    with pytest.raises(optjit.Error, match=r"^parameter 'b' is in group 2, but the groups are 0 "
                                           r"\(the default\) to 1$"):
        optjit.Engine("sgd(lr=0.1)", ["a", "b"], ws, group_of=[0, 2], groups=2)
    e = optjit.Engine("sgd(lr=0.1)", ["a", "b"], ws, group_of=[0, 1], groups=2)
    e.set_hyper("sgd.lr", 0.0, group=1)  # group 1 frozen
    e.step([np.ones(4, np.float32), np.ones(3, np.float32)])
    assert np.allclose(ws[0], 0.9) and np.array_equal(ws[1], np.ones(3, np.float32))


def test_an_engine_allocates_no_memory_the_caller_gives_it():
    """An engine steps the caller's parameters in place, and state the caller binds: creating
    one allocated and zeroed the parameters' size twice and the gradients' once, and its own
    state, only to drop them (an AdamW engine over 400 MB of parameters peaked 1.9 GB above them
    and took 3.5 s; optjit.torch's first step on it 2.3 GB and 6.9 s, where torch's own took
    1.5 GB and 3 s). State it keeps itself is made at the first step. Peak memory of a fresh
    process (VmHWM: ru_maxrss would carry the parent's over)."""
    import subprocess
    import sys

    code = """
import re, sys, numpy as np, optjit, torch
import optjit.torch as ot
peak = lambda: int(re.search(r"VmHWM:\\s*(\\d+)", open("/proc/self/status").read())[1]) / 1024
n = 25_000_000  # 100 MB of parameters
w, g = np.ones(n, np.float32), np.ones(n, np.float32)
m, v = np.full(n, 0.5, np.float32), np.full(n, 0.5, np.float32)  # touched, as w and g
p = torch.nn.Parameter(torch.ones(n)); p.grad = torch.ones(n)
before = peak()
e = optjit.Engine(sys.argv[1], ["w"], [w], cache=False)
made = peak() - before
bound = sys.argv[1].startswith("adamw")
if bound:
    e.bind_state(0, "exp_avg", m); e.bind_state(0, "exp_avg_sq", v)
e.step([g])
stepped = peak() - before
opt = (ot.AdamW if bound else ot.SGD)([p], lr=0.1)
at = peak()
opt.step()
print(made, stepped, peak() - at)
"""
    for pipeline, own_mb, torch_mb in (("sgd(lr=0.1, momentum=0.9)", 100, 0),
                                       ("adamw(lr=0.1)", 0, 200)):
        made, stepped, bridged = map(float, subprocess.check_output(
            [sys.executable, "-c", code, pipeline]).split())
        assert made < 25, (pipeline, made)  # nothing of the model's size
        # Its own state (SGD's momentum) at the step; none where all of it is bound.
        assert own_mb - 25 < stepped < own_mb + 25, (pipeline, stepped)
        # optjit.torch: the state tensors torch sees, and nothing of their size besides.
        assert torch_mb - 25 < bridged < torch_mb + 25, (pipeline, bridged)


def test_low_level_engine_keeps_the_arrays_it_steps_alive():
    """The engine writes its parameters and bound states at every step: an array the caller
    drops must stay alive with it (it was freed under the engine, which then wrote into memory
    numpy had handed to other arrays: a crash or other arrays changed). A rebound parameter or
    a state bound again lets the old array go, and the engine's end lets the rest go."""
    np = pytest.importorskip("numpy")
    w = np.zeros(5000, np.float32)
    m = np.zeros(5000, np.float32)
    w_ref, m_ref = weakref.ref(w), weakref.ref(m)
    e = optjit.Engine("adamw(lr=0.1)", ["w"], [w])
    e.bind_state(0, "exp_avg", m, adopt=True)
    del w, m
    gc.collect()
    assert w_ref() is not None and m_ref() is not None
    e.step([np.ones(5000, np.float32)])
    # AdamW's first step moves every element by lr (m / sqrt(v) = 1), and m is (1 - beta1) g.
    assert np.allclose(w_ref(), -0.1, atol=1e-6) and np.allclose(m_ref(), 0.1, atol=1e-7)
    new_w, new_m = np.full(5000, 2.0, np.float32), np.zeros(5000, np.float32)
    e.rebind_param(0, new_w)
    e.bind_state(0, "exp_avg", new_m, adopt=True)
    gc.collect()
    assert w_ref() is None and m_ref() is None
    new_refs = [weakref.ref(new_w), weakref.ref(new_m)]
    del new_w, new_m
    gc.collect()
    assert all(r() is not None for r in new_refs)
    del e
    gc.collect()
    assert all(r() is None for r in new_refs)


def test_low_level_engine_runs_calls_from_other_threads_after_the_step_not_inside_it():
    """step() runs without the GIL, so another thread can call the same engine meanwhile; such a
    call used to run inside the step (a second step or a new lr racing on the state). Here the
    step is held in its middle (its all-reduce, which calls Python: a one-process shard) while
    another thread sets lr and steps: both must wait for the step's end, and the first step must
    use the old lr."""
    np = pytest.importorskip("numpy")
    import threading

    w = np.zeros(1000, np.float32)
    g = np.full(1000, 0.5, np.float32)  # norm 15.8: clipped to 1, each element by 1 / |g|
    other = threading.Thread(target=lambda: (e.set_hyper("lr", [1.0]), e.step([g])))
    finished_inside = []

    def all_reduce(partials):  # one process: the partials are the sums
        if not finished_inside:  # the first step's; the other thread's step passes
            other.start()
            other.join(timeout=0.5)
            finished_inside.append(not other.is_alive())

    e = optjit.Engine("chain(clip_grad_norm(max_norm=1.0), sgd(lr=0.1))", ["w"], [w],
                      shard=(all_reduce, 0, 1, "test", [("w", 1000)], [0]))
    e.step([g])
    other.join()
    assert finished_inside == [False]
    # The first step with lr 0.1, the other thread's after it with lr 1: 1.1 / sqrt(1000) each.
    assert e.step_count == 2
    assert np.allclose(w, -1.1 / math.sqrt(1000), rtol=1e-6)
    # From inside its own step (its all-reduce calling it): an error, not waiting for itself.
    calls = []

    def reentrant(partials):
        try:
            e2.set_hyper("lr", [0.5])
        except optjit.Error as err:
            calls.append(str(err))

    e2 = optjit.Engine("chain(clip_grad_norm(max_norm=1.0), sgd(lr=0.1))", ["w"],
                       [np.zeros(10, np.float32)],
                       shard=(reentrant, 0, 1, "test", [("w", 10)], [0]))
    e2.step([np.ones(10, np.float32)])
    assert calls and set(calls) == {
        "this engine was called from inside its own step (from its all-reduce)"}
    del e, e2  # (each is in a cycle through its own all-reduce's closure)


class _JaxLike:
    """What a JAX array is to optjit: DLPack (unversioned, so no read-only flag) from a class
    of module jaxlib."""
    __module__ = "jaxlib._jax"

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, **kwargs):
        return self._a.__dlpack__()

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def test_low_level_engine_refuses_arrays_that_are_not_what_they_stand_for():
    """A gradient, a rebound parameter or a bound state of another dtype or size would be read
    (or written) past its end or as other numbers: each is a clear error, and nothing moved."""
    np = pytest.importorskip("numpy")
    w = np.linspace(-1, 1, 1000).astype(np.float32)
    e = optjit.Engine("adamw(lr=1e-2)", ["w"], [w])
    before = w.copy()
    cases = [
        (lambda: e.step([np.ones(10, np.float32)]),
         "the gradient of parameter 'w' has shape [10]: the parameter's is [1000]"),
        (lambda: e.step([np.ones((10, 100), np.float32)]),
         "the gradient of parameter 'w' has shape [10, 100]: the parameter's is [1000]"),
        (lambda: e.step([np.ones(1000, np.float64)]),
         "the gradient of parameter 'w' is float64: it must be f32"),
        (lambda: e.step([np.ones(1000, np.int32)]),
         "the gradient of parameter 'w' is int32: it must be f32"),
        (lambda: e.rebind_param(0, np.zeros(10, np.float32)),
         "parameter 'w' cannot be rebound to an array of shape [10]: its shape is [1000]"),
        (lambda: e.rebind_param(0, np.zeros(1000, np.float64)),
         "parameter 'w' cannot be rebound to a float64 array: it is f32"),
        (lambda: e.rebind_param(3, np.zeros(1000, np.float32)),
         "rebind_param: no parameter 3 (there are 1)"),
        (lambda: e.bind_state(0, "exp_avg", np.zeros(999, np.float32), adopt=True),
         "state 'exp_avg' of parameter 'w' has 999 elements: it must have 1000"),
        (lambda: e.bind_state(0, "exp_avg", np.zeros(1000, np.float16), adopt=True),
         "state 'exp_avg' of parameter 'w' is a float16: it must be f32"),
        # Memory optjit writes must be writable: np.frombuffer over bytes is not.
        (lambda: e.rebind_param(0, np.frombuffer(bytes(4000), np.float32)),
         "parameter 'w' is read-only: optjit updates it in place"),
        (lambda: e.bind_state(0, "exp_avg", np.frombuffer(bytes(4000), np.float32), adopt=True),
         "state 'exp_avg' of parameter 'w' is read-only: optjit updates it in place"),
        (lambda: optjit.Engine("sgd(lr=0.1)", ["v"], [np.frombuffer(bytes(40), np.float32)]),
         "parameter 'v' is read-only: optjit updates it in place"),
        # JAX's arrays are immutable but export no read-only flag: they were stepped in place
        # (an array of JAX, as optjit sees one, stands in where JAX is not installed).
        (lambda: optjit.Engine("sgd(lr=0.1)", ["v"], [_JaxLike(np.zeros(4, np.float32))]),
         "parameter 'v' is a JAX array, which is immutable: optjit updates parameters and "
         "states in place; step writable copies (numpy.array(x), or torch tensors) and convert "
         "them back"),
        (lambda: e.bind_state(0, "exp_avg", _JaxLike(np.zeros(1000, np.float32)), adopt=True),
         "state 'exp_avg' of parameter 'w' is a JAX array, which is immutable"),
        # The dtype by its name (it was "a dtype optjit cannot step (code 0, 32 bits)").
        (lambda: optjit.Engine("sgd(lr=0.1)", ["v"], [np.zeros(4, np.int32)]),
         "parameter 'v' is int32, which optjit cannot step; use float32, float64, float16 or "
         "bfloat16"),
        # A reversed view fills its memory, backwards: not "a slice or an expanded view".
        (lambda: e.step([np.ones(1000, np.float32)[::-1]]),
         "the gradient of parameter 'w' is not contiguous (a reversed view: its elements run "
         "backwards in memory); optjit steps arrays in place and does not copy them (call "
         ".contiguous() first)"),
        (lambda: e.step([np.ones(2000, np.float32)[::2]]),
         "the gradient of parameter 'w' is not contiguous (a slice or an expanded view: its "
         "elements do not fill its memory); optjit steps arrays in place and does not copy them "
         "(call .contiguous() first)"),
        (lambda: optjit.Engine("sgd(lr=0.1)", ["v"], [[1.0, 2.0]]),
         "parameter 'v' is not an array (NumPy, PyTorch, CuPy, ... : DLPack or the buffer "
         "protocol), but a list"),
        # An array that cannot be exported says why (it was "not an array ... but a ndarray").
        (lambda: optjit.Engine("sgd(lr=0.1)", ["v"], [np.zeros(4, ">f4")]),
         "parameter 'v' cannot be read as an array: DLPack only supports native byte order"),
        # One array where the list of them was meant: its rows were taken as 1000 gradients
        # and the first one's shape named.
        (lambda: e.step(np.ones(1000, np.float32)),
         "step() got 1000 gradients for 1 parameters (a list of arrays, one per parameter"),
        # A name keys the state in checkpoints: save() wrote a file that load() refused.
        (lambda: optjit.Engine("sgd(lr=0.1)", ["v", "v"],
                               [np.zeros(4, np.float32), np.zeros(4, np.float32)]),
         "parameters 0 and 1 are both named 'v': each parameter needs its own name"),
        # One value for both betas was taken for both, silently.
        (lambda: e.set_hyper("betas", [0.5]),
         "hyperparameter 'betas' has 2 elements (adamw.betas.0, adamw.betas.1): give 2 values"),
        # A queue is an address: queue=1 on OpenCL was dereferenced (a segmentation fault).
        (lambda: optjit.Engine("sgd(lr=0.1)", ["v"], [np.zeros(4, np.float32)],
                               backend="opencl", queue=1),
         "queue 0x1 is not the address of a cl_command_queue"),
        (lambda: optjit.Engine("sgd(lr=0.1)", ["v"], [np.zeros(4, np.float32)],
                               backend="webgpu", queue=0x10004),
         "queue 0x10004 is not the address of a WGPUDevice"),
        (lambda: optjit.Engine.on_device("sgd(lr=0.1)", ["v"], [(1, 0)], ["f32"], [[4]],
                                         backend="opencl"),
         "parameter 'v': buffer 0x1 is not the address of a cl_mem"),
        (lambda: optjit.Engine("sgd(lr=0.1)", ["v"], [np.zeros(4, np.float32)],
                               backend="cuda", queue=3),
         "queue 0x3 is not the address of a CUstream (or 0x1, 0x2: the default streams)"),
        # Device indices below -1 were taken for -1, and the CPU's index was never read.
        (lambda: optjit.Engine("sgd(lr=0.1)", ["v"], [np.zeros(4, np.float32)],
                               backend="opencl", device=-5),
         "device index -5: an index from `optjit devices` (0, 1, ...), or -1 for the first GPU"),
        (lambda: optjit.Engine("sgd(lr=0.1)", ["v"], [np.zeros(4, np.float32)], device=7),
         "no cpu device 7 (there is one, 0)"),
        (lambda: optjit.Engine("sgd(lr=0.1)", ["v"], [np.zeros(4, np.float32)], groups=0),
         "groups: 0; the default group is one, so at least 1"),
        # A shard that is not the tuple it must be was "RuntimeError: std::bad_cast".
        (lambda: optjit.Engine("sgd(lr=0.1)", ["v"], [np.zeros(4, np.float32)], shard=5),
         "shard: expected (all_reduce, rank: int, size: int, name: str, [(name, numel[, "
         "quantize]), ...], [offset, ...][, order: str[, all_reduce_device]])"),
    ]
    for call, message in cases:
        with pytest.raises(optjit.Error, match=re.escape(message)):
            call()
    assert np.array_equal(w, before)
    read_only = np.ones(1000, np.float32)
    read_only.flags.writeable = False  # gradients are only read
    assert e.step([read_only]) is False  # the right arrays still step
    assert not np.array_equal(w, before)
    # 8-bit state: the codes are uint8 and the scales one float32 per block of 256.
    q = optjit.Engine('adamw(lr=1e-2, state_format="8bit")', ["w"],
                      [np.zeros(4096, np.float32)])
    with pytest.raises(optjit.Error, match="state 'exp_avg' of parameter 'w' is a float32: it "
                                           "must be u8"):
        q.bind_state(0, "exp_avg", np.zeros(4096, np.float32), adopt=True)
    with pytest.raises(optjit.Error, match="state 'exp_avg.absmax' of parameter 'w' has 4096 "
                                           "elements: it must have 16"):
        q.bind_state(0, "exp_avg.absmax", np.zeros(4096, np.float32), adopt=True)
    q.bind_state(0, "exp_avg", np.zeros(4096, np.uint8), adopt=False)


def test_text_taken_for_a_path_is_shown_short_and_whole_characters():
    """Text without '(' is taken for a pipeline file's path and echoed in the error: 2 MB of it
    was 2 MB of message, and a cut inside a UTF-8 character was a UnicodeDecodeError."""
    for text, shown in [("a" + "\u00e9" * 300, "a" + "\u00e9" * 100),
                        ("\u00e9" * 300, "\u00e9" * 100), ("a" * 2_000_000, "a" * 200)]:
        size = len(text.encode())
        with pytest.raises(optjit.Error) as e:
            optjit.plan(text)
        assert str(e.value) == (f"'{shown}... ({size} bytes)' is neither pipeline text nor a "
                                "readable file")


def test_a_checkpoint_that_does_not_fit_is_an_error_not_a_fresh_start():
    """torch fails on a damaged checkpoint (a state of another shape, a missing moment); optjit
    used to start such state afresh, silently. A torch.optim.AdamW checkpoint still loads."""
    def model():
        torch.manual_seed(0)
        return torch.nn.Linear(64, 64)

    def trained(opt_cls, m, **kw):
        o = opt_cls(m.parameters(), lr=1e-2, **kw)
        for _ in range(2):
            o.zero_grad()
            m(torch.ones(2, 64)).square().sum().backward()
            o.step()
        return o

    sd = trained(torch.optim.AdamW, model()).state_dict()

    def load(change, opt_cls=ot.AdamW, **kw):
        s = copy.deepcopy(sd)
        change(s)
        m = model()
        o = opt_cls(m.parameters(), lr=1e-2, **kw)
        o.load_state_dict(s)
        m(torch.ones(2, 64)).square().sum().backward()
        o.step()
        return o

    load(lambda s: None)  # as it is
    bad = [
        (lambda s: s["state"][1].__setitem__("exp_avg", torch.zeros(5)),
         r"optimizer.state\[p\]\['exp_avg'\] of parameter 1 has shape \[5\], but this "
         r"optimizer keeps \[64\] for it"),
        (lambda s: s["state"][0].pop("exp_avg_sq"),
         "optimizer.state of parameter 0 has exp_avg but not exp_avg_sq: a damaged or "
         "mismatched checkpoint"),
        (lambda s: s["state"][0].__setitem__("step", torch.tensor(float("nan"))),
         r"optimizer.state\[p\]\['step'\] of parameter 0 is nan: a step count is a whole "
         r"number from 0 to 2\^53"),
        (lambda s: s["state"][0].__setitem__("step", torch.tensor(-2.0)),
         r"of parameter 0 is -2.0: a step count"),
        (lambda s: s["state"][0].__setitem__("step", torch.tensor(2.5)),
         r"of parameter 0 is 2.5: a step count"),
        (lambda s: s["param_groups"][0].__setitem__("betas", (0.9,)),
         r"param_groups\[0\]\['betas'\] has 1 value\(s\); 'betas' takes 2"),
        (lambda s: s["param_groups"][0].__setitem__("lr", None),
         r"param_groups\[0\]\['lr'\] is None, not a number"),
        # (float() reads "0.01"; torch's step fails on it, and so does this)
        (lambda s: s["param_groups"][0].__setitem__("lr", "0.01"),
         r"param_groups\[0\]\['lr'\] is '0.01', not a number"),
        (lambda s: s["param_groups"][0].__setitem__("betas", ("0.9", 0.999)),
         r"param_groups\[0\]\['betas'\] is \('0.9', 0.999\), not a number"),
        # (an AttributeError from inside load_state_dict before)
        (lambda s: s["state"].__setitem__(0, None),
         "the state dict's state of parameter 0 is None, not a dict of state tensors"),
        # (said to be missing before: it is there, but not a tensor)
        (lambda s: s["state"][0].__setitem__("exp_avg", "x"),
         "optimizer.state of parameter 0 has exp_avg_sq but not exp_avg as a tensor "
         r"\(exp_avg is str\): a damaged or mismatched checkpoint"),
    ]
    for change, message in bad:
        with pytest.raises(optjit.Error, match=message):
            load(change)
    # 8-bit codes without their format (a checkpoint from before the state dict said it) into
    # an optimizer that keeps f32 state: said, not read as values.
    q = trained(ot.AdamW, torch.nn.Linear(64, 128), state_format="8bit").state_dict()
    assert q["state"][0]["exp_avg.format"] == "q8"
    for st in q["state"].values():
        for k in [k for k in st if k.endswith(".format")]:
            del st[k]
    m = torch.nn.Linear(64, 128)
    o = ot.AdamW(m.parameters(), lr=1e-2)
    o.load_state_dict(q)
    m(torch.ones(2, 64)).square().sum().backward()
    with pytest.raises(optjit.Error, match=r"\['exp_avg'\] of parameter 0 holds quantized codes "
                                           r"\(a checkpoint of 8-bit, 4-bit or fp8 state\), but "
                                           r"this optimizer keeps it as f32"):
        o.step()


@pytest.mark.parametrize("name,kw", [("AdamW", dict(amsgrad=True)),
                                     ("SGD", dict(momentum=0.9, nesterov=True)),
                                     ("RMSprop", dict(centered=True)),
                                     ("Adam", dict(maximize=True))], ids=lambda v: str(v))
def test_a_checkpoint_with_another_structure_is_followed_as_torch_follows_it(name, kw):
    """amsgrad, nesterov, centered, maximize choose the compiled program. A torch checkpoint
    made with other values than the optimizer it is loaded into brings them in its param
    groups, and torch's optimizer follows them from then on: so does optjit's (it rewrites and
    recompiles the program), instead of stepping with the structure it was made with."""
    x = torch.randn(16, 8, generator=torch.Generator().manual_seed(1))

    def model():
        torch.manual_seed(0)
        return torch.nn.Linear(8, 4)

    def steps(o, m, k):
        for _ in range(k):
            o.zero_grad()
            m(x).square().sum().backward()
            o.step()

    mt, mo = model(), model()
    t = getattr(torch.optim, name)(mt.parameters(), lr=1e-2, foreach=False, **kw)
    steps(t, mt, 2)
    o = getattr(ot, name)(mo.parameters(), lr=1e-2)  # made with torch's defaults
    steps(getattr(ot, name)(mo.parameters(), lr=1e-2, **kw), mo, 2)
    o.load_state_dict(copy.deepcopy(t.state_dict()))
    steps(t, mt, 3)
    steps(o, mo, 3)
    assert max_err(list(mt.parameters()), list(mo.parameters())) <= 1e-6
    assert all(f"{k}=true" in o.pipeline for k, v in kw.items() if v is True)


def test_groups_that_disagree_on_the_structure_are_an_error():
    a, b = torch.nn.Parameter(torch.zeros(3)), torch.nn.Parameter(torch.zeros(3))
    message = (r"'amsgrad' chooses the program's structure and must be the same in every "
               r"parameter group \(they hold \[False, True\]\)")
    with pytest.raises(optjit.Error, match=message):  # at once
        ot.AdamW([{"params": [a]}, {"params": [b], "amsgrad": True}])
    o = ot.AdamW([a])
    o.add_param_group({"params": [b], "amsgrad": True})
    a.grad = b.grad = torch.ones(3)
    with pytest.raises(optjit.Error, match=message):  # at the step after add_param_group
        o.step()


@pytest.mark.parametrize("make", [
    lambda ps: ot.AdamW(ps, lr=1e-2, max_grad_norm=1.0),
    lambda ps: ot.NAdam(ps, lr=1e-2),  # a scalar state (mu_product)
    lambda ps: ot.AdamW(ps, lr=1e-2, state_format="8bit"),
    lambda ps: ot.Optimizer(ps, "adamw(lr=1e-2)", {"lr": 1e-2}),
], ids=["adamw+clip", "nadam", "adamw-8bit", "pipeline"])
def test_a_deep_copied_or_pickled_optimizer_continues_as_the_original(make):
    """copy.deepcopy((model, optimizer)) and pickle (torch.save(optimizer)) keep torch's state
    and optjit's configuration: the copy steps on exactly as the original does (it lost its
    configuration before and failed at its first step)."""
    import pickle

    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(64, 80), torch.nn.Tanh(), torch.nn.Linear(80, 1))
    o = make(m.parameters())
    x = torch.randn(16, 64)

    def steps(m, o, k):
        for _ in range(k):
            o.zero_grad()
            m(x).square().mean().backward()
            o.step()

    steps(m, o, 2)
    copies = [copy.deepcopy((m, o)), pickle.loads(pickle.dumps((m, o)))]
    steps(m, o, 3)
    for mc, oc in copies:
        assert oc.pipeline == o.pipeline
        steps(mc, oc, 3)
        for a, b in zip(m.parameters(), mc.parameters()):
            assert torch.equal(a, b)
        for pa, pb in zip(m.parameters(), mc.parameters()):
            for k, v in o.state[pa].items():
                assert torch.equal(v, oc.state[pb][k]), k


def test_the_step_runs_without_autograd_and_torch_compile_skips_it(monkeypatch):
    """step() runs under no_grad (as torch's optimizers do), and under torch.compile it is one
    opaque call that dynamo skips (torch.compiler.disable), with the eager results."""
    seen = []
    real = ot._Engine.step

    def step(self, *args, **kwargs):
        seen.append(torch.is_grad_enabled())
        return real(self, *args, **kwargs)

    monkeypatch.setattr(ot._Engine, "step", step)
    x = torch.randn(16, 8, generator=torch.Generator().manual_seed(0))
    finals = []
    for compiled in (False, True):
        torch.manual_seed(0)
        m = torch.nn.Linear(8, 4)
        o = ot.AdamW(m.parameters(), lr=1e-2)
        f = torch.compile(o.step) if compiled else o.step
        for _ in range(3):
            o.zero_grad()
            m(x).square().sum().backward()
            f()
        finals.append([p.detach().clone() for p in m.parameters()])
    assert seen == [False] * 6
    assert all(torch.equal(a, b) for a, b in zip(*finals))


@pytest.mark.parametrize("change", ["replace a tensor", "replace the dict", "in place",
                                    "reset the state"])
def test_state_the_user_changes_between_steps_is_what_the_next_step_uses(change):
    """As in torch: a state tensor replaced in optimizer.state (or a parameter's whole state
    dict) is the one the next step reads and writes. optjit kept writing the memory it was
    given first, which the replacement had freed (heap corruption, then a crash). And
    ``optimizer.state = defaultdict(dict)`` starts every state afresh (optjit stepped on with
    the old state, and optimizer.state stayed empty)."""
    x = torch.randn(16, 8, generator=torch.Generator().manual_seed(0))

    def run(cls):
        torch.manual_seed(0)
        m = torch.nn.Linear(8, 4)
        o = cls(m.parameters(), lr=1e-2)
        for k in range(4):
            o.zero_grad()
            m(x).square().sum().backward()
            o.step()
            if k == 1 and change == "reset the state":
                o.state = collections.defaultdict(dict)
            elif k == 1:
                for p in m.parameters():
                    if change == "replace a tensor":
                        o.state[p]["exp_avg"] = torch.full_like(p, 0.5)
                    elif change == "replace the dict":
                        o.state[p] = {}
                    else:
                        o.state[p]["exp_avg_sq"].mul_(2.0)
        return m, o

    (mt, to), (mo, oo) = run(torch.optim.AdamW), run(ot.AdamW)
    assert max_err(list(mt.parameters()), list(mo.parameters())) <= 1e-6
    for pt, po in zip(mt.parameters(), mo.parameters()):
        assert float(oo.state[po]["step"]) == float(to.state[pt]["step"])
        assert torch.allclose(oo.state[po]["exp_avg"], to.state[pt]["exp_avg"], atol=1e-7)


def test_a_state_dict_loads_with_weights_only():
    import io

    m = torch.nn.Linear(4, 3)
    o = ot.AdamW(m.parameters())
    m(torch.ones(2, 4)).sum().backward()
    o.step()
    buf = io.BytesIO()
    torch.save(o.state_dict(), buf)
    buf.seek(0)
    sd = torch.load(buf, weights_only=True)  # torch's default: plain containers only
    torch.optim.AdamW(m.parameters()).load_state_dict(sd)
    ot.AdamW(m.parameters()).load_state_dict(sd)


def _conv_model(channels_last):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(32, 64, 3), torch.nn.ReLU(), torch.nn.Conv2d(64, 4, 1))
    return m.to(memory_format=torch.channels_last) if channels_last else m


@pytest.mark.parametrize("kw", [dict(), dict(max_grad_norm=0.5)], ids=["adamw", "adamw+clip"])
def test_channels_last_parameters_step_in_place_as_torch(kw):
    """Vision models train with channels_last weights (dense, not row-major): the state is laid
    out as its parameter and the step runs in memory order; results are torch's."""
    x = torch.randn(2, 32, 8, 8, generator=torch.Generator().manual_seed(0))
    x = x.to(memory_format=torch.channels_last)
    clip = kw.get("max_grad_norm")

    def run(make):
        m = _conv_model(True)
        o = make(m.parameters())
        for _ in range(3):
            o.zero_grad()
            m(x).square().mean().backward()
            if clip and isinstance(o, torch.optim.AdamW):
                torch.nn.utils.clip_grad_norm_(m.parameters(), clip, foreach=False)
            o.step()
        return m, o

    mt, to = run(lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1, foreach=False))
    mo, oo = run(lambda ps: ot.AdamW(ps, lr=1e-2, weight_decay=0.1, **kw))
    w = mo[0].weight
    assert not w.is_contiguous() and w.is_contiguous(memory_format=torch.channels_last)
    assert oo.state[w]["exp_avg"].stride() == w.stride()
    assert max_err(list(mt.parameters()), list(mo.parameters())) <= 1e-6
    # A checkpoint of the row-major model loads into the channels_last one (its state takes
    # the parameters' layout) and continues as torch's does.
    mc = _conv_model(False)
    tc = torch.optim.AdamW(mc.parameters(), lr=1e-2, weight_decay=0.1, foreach=False)
    for _ in range(2):
        tc.zero_grad()
        mc(x.contiguous()).square().mean().backward()
        tc.step()
    sd = copy.deepcopy(tc.state_dict())
    ml, mr = _conv_model(True), _conv_model(True)
    ml.load_state_dict(mc.state_dict())
    mr.load_state_dict(mc.state_dict())
    ol = ot.AdamW(ml.parameters(), lr=1e-2, weight_decay=0.1)
    orr = torch.optim.AdamW(mr.parameters(), lr=1e-2, weight_decay=0.1, foreach=False)
    ol.load_state_dict(sd)
    orr.load_state_dict(copy.deepcopy(sd))
    for m, o in ((ml, ol), (mr, orr)):
        o.zero_grad()
        m(x).square().mean().backward()
        o.step()
    assert ol.state[ml[0].weight]["exp_avg"].stride() == ml[0].weight.stride()
    assert max_err(list(ml.parameters()), list(mr.parameters())) <= 1e-6


def test_8bit_state_of_a_channels_last_weight_is_quantized_in_memory_order():
    """Blocks of 256 are the elements as the step meets them in memory: the channels_last weight
    steps bit for bit as the same weight permuted to row-major (N, H, W, C) does."""
    torch.manual_seed(0)
    w = torch.randn(64, 32, 3, 3).to(memory_format=torch.channels_last)  # 18,432 elements
    a = torch.nn.Parameter(w.clone(memory_format=torch.preserve_format))
    b = torch.nn.Parameter(w.permute(0, 2, 3, 1).contiguous())  # its memory order, row-major
    oa = ot.AdamW([a], lr=1e-2, state_format="8bit")
    ob = ot.AdamW([b], lr=1e-2, state_format="8bit")
    for k in range(3):
        g = torch.randn(64, 32, 3, 3, generator=torch.Generator().manual_seed(k))
        a.grad = g.to(memory_format=torch.channels_last)
        b.grad = g.permute(0, 2, 3, 1).contiguous()
        oa.step()
        ob.step()
    assert torch.equal(a.detach().permute(0, 2, 3, 1), b.detach())
    codes = oa.state[a]["exp_avg"]
    assert codes.dtype == torch.uint8 and codes.stride() == a.stride()
    assert torch.equal(codes.permute(0, 2, 3, 1), ob.state[b]["exp_avg"])
    # A gradient in another memory order than its parameter's is read in the parameter's
    # (copied), not misread as its memory order.
    g = torch.randn(64, 32, 3, 3)
    a.grad = g.contiguous()
    b.grad = g.permute(0, 2, 3, 1).contiguous()
    with pytest.warns(UserWarning, match="laid out unlike its parameter"):
        oa.step()
    ob.step()
    assert torch.equal(a.detach().permute(0, 2, 3, 1), b.detach())
    assert torch.equal(oa.state[a]["exp_avg"].permute(0, 2, 3, 1), ob.state[b]["exp_avg"])


@pytest.mark.parametrize("scaled", [False, True], ids=["clip", "clip+GradScaler"])
def test_layers_unfrozen_later_step_with_the_fused_clip_as_torch(scaled):
    """Gradual unfreezing: parameters that get gradients later have fewer steps than the
    others, and the clip (and a GradScaler's found-inf) spans all of them. optjit then unscales
    and clips with torch over all of them and steps each set with its own count, as torch does
    (this was an error). Step 4 has an Inf gradient under the scaler: skipped everywhere."""
    check_unfreezing(torch.device("cpu"), scaled)


def check_unfreezing(device, scaled):
    """test_layers_unfrozen_later_step_with_the_fused_clip_as_torch on `device`."""
    x = torch.randn(16, 8, generator=torch.Generator().manual_seed(0)).to(device)

    def run(fused):
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(),
                                torch.nn.Linear(8, 1)).to(device)
        for p in m[0].parameters():
            p.requires_grad_(False)
        o = (ot.AdamW(m.parameters(), lr=1e-2, max_grad_norm=0.5) if fused
             else torch.optim.AdamW(m.parameters(), lr=1e-2, foreach=False))
        scaler = torch.amp.GradScaler(device.type, init_scale=2.0 ** 8) if scaled else None
        for k in range(7):
            if k == 2:
                for p in m[0].parameters():
                    p.requires_grad_(True)
            o.zero_grad()
            loss = m(x).square().mean()
            (scaler.scale(loss) if scaled else loss).backward()
            if scaled and k == 4:
                m[2].weight.grad[0, 0] = float("inf")
            if scaled and not fused:
                scaler.unscale_(o)
            if not fused:
                torch.nn.utils.clip_grad_norm_([p for p in m.parameters() if p.grad is not None],
                                               0.5)
            if scaled:
                scaler.step(o)
                scaler.update()
            else:
                o.step()
        return m, o

    (mt, to), (mo, oo) = run(False), run(True)
    assert max_err(list(mt.parameters()), list(mo.parameters())) <= 1e-6
    for pt, po in zip(mt.parameters(), mo.parameters()):
        assert float(oo.state[po]["step"]) == float(to.state[pt]["step"])
    assert {float(oo.state[p]["step"]) for p in mo.parameters()} == (
        {6.0, 4.0} if scaled else {7.0, 5.0})


def test_a_pipeline_text_with_a_global_reduction_over_different_step_counts_is_an_error():
    a, b = torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(3))
    o = ot.Optimizer([a, b], "chain(clip_grad_norm(max_norm=1.0), adamw(lr=1e-2))", {"lr": 1e-2})
    a.grad = torch.ones(3)
    o.step()  # only a: b has taken no step
    a.grad, b.grad = torch.ones(3), torch.ones(3)
    with pytest.raises(optjit.Error, match="have different step counts; optjit steps them "
                                           "together only when they share both"):
        o.step()


@pytest.mark.parametrize("name", ["Rprop", "ASGD"])
def test_state_starts_from_the_lr_of_the_first_step_as_in_torch(name):
    """Rprop's step sizes and ASGD's eta start from the lr a group has at the first step: a
    group's own, after a warmup scheduler scaled it. They started from the constructor's."""
    def run(mod):
        torch.manual_seed(0)
        a, b = torch.nn.Parameter(torch.randn(5)), torch.nn.Parameter(torch.randn(5))
        kw = {} if mod is ot else {"foreach": False}
        o = getattr(mod, name)([{"params": [a]}, {"params": [b], "lr": 0.05}], lr=0.01, **kw)
        s = torch.optim.lr_scheduler.LinearLR(o, start_factor=0.1, total_iters=3)
        for k in range(3):
            a.grad, b.grad = torch.full((5,), 1.0 + k), torch.full((5,), -1.0 - k)
            o.step()
            s.step()
        return [a, b]

    assert max_err(run(torch.optim), run(ot)) <= 1e-7


def test_random_training_histories_match_torch():
    """Seeded random histories (steps, gradients set to None, lr changes, freezing, state_dict
    round trips, add_param_group, state replaced or emptied, with and without the fused clip)
    through torch.optim.X and optjit.torch.X: the same parameters. (Found the two bugs above.)"""
    check_random_histories(torch.device("cpu"), range(40))


def check_random_histories(device, seeds):
    """test_random_training_histories_match_torch on `device` (python/tests_gpu: CUDA)."""
    import random

    names = [("AdamW", dict(lr=1e-2, weight_decay=0.05)), ("SGD", dict(lr=0.05, momentum=0.9)),
             ("NAdam", dict(lr=1e-2)), ("RMSprop", dict(lr=1e-3, momentum=0.5)),
             ("Adagrad", dict(lr=0.05)), ("ASGD", dict(lr=0.01, t0=2)),
             ("RAdam", dict(lr=1e-2)), ("Rprop", dict(lr=0.01)), ("Adadelta", dict(lr=0.5))]
    kinds = ["step", "step", "step", "none_some", "lr", "freeze", "unfreeze", "sd_roundtrip",
             "add_group", "replace_state", "empty_state"]

    def run(mod, name, kw, clip, ops, seed):
        torch.manual_seed(seed)
        m = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3),
                                torch.nn.Linear(3, 1)).to(device)
        ps = list(m.parameters())
        okw = dict(kw, **({"max_grad_norm": 0.3} if mod is ot and clip else {}))
        o = getattr(mod, name)(ps[:4], **okw)
        x = torch.randn(8, 6, generator=torch.Generator().manual_seed(seed)).to(device)
        frozen, added = set(), False
        for op in ops:
            if op in ("step", "none_some"):
                o.zero_grad()
                m(x).square().mean().backward()
                for i, p in enumerate(ps):
                    if i in frozen or (op == "none_some" and i % 2 == seed % 2):
                        p.grad = None
                if clip and mod is not ot:
                    torch.nn.utils.clip_grad_norm_(
                        [p for g in o.param_groups for p in g["params"] if p.grad is not None],
                        0.3, foreach=False)
                o.step()
            elif op == "lr":
                for g in o.param_groups:
                    g["lr"] *= 0.5
            elif op == "freeze":
                frozen.add(seed % 4)
            elif op == "unfreeze":
                frozen.clear()
            elif op == "sd_roundtrip":
                o.load_state_dict(copy.deepcopy(o.state_dict()))
            elif op == "add_group" and not added:
                o.add_param_group({"params": ps[4:], "lr": 0.02})
                added = True
            elif op == "replace_state":
                st = o.state.get(ps[0])
                for k in list(st or {}):
                    if isinstance(st[k], torch.Tensor) and st[k].shape == ps[0].shape:
                        st[k] = st[k] * 0.5
            elif op == "empty_state" and ps[1] in o.state:
                o.state[ps[1]] = {}
        return ps

    compared = 0
    for seed in seeds:
        r = random.Random(seed)
        name, kw = r.choice(names)
        clip = name != "Rprop" and r.random() < 0.4
        ops = [r.choice(kinds) for _ in range(r.randint(4, 12))]
        try:
            want = run(torch.optim, name, dict(kw, foreach=False), clip, ops, seed)
        except Exception:
            continue  # a history torch itself refuses
        got = run(ot, name, kw, clip, ops, seed)
        assert max_err(want, got) <= 1e-5, (seed, name, clip, ops)
        compared += 1
    assert compared >= 0.75 * len(seeds)


def test_a_parameter_given_twice_is_an_error_and_flags_may_be_numbers():
    a, b = torch.nn.Parameter(torch.ones(4)), torch.nn.Parameter(torch.ones(4))
    message = "a parameter appears twice among the optimizer's parameters"
    with pytest.raises(optjit.Error, match=message):
        ot.AdamW([a, b, a])
    o = ot.AdamW([a])
    with pytest.raises(optjit.Error, match=message):
        o.add_param_group({"params": [b, a]})
    with pytest.raises(TypeError, match="ordered collections"):  # torch's own refusal
        ot.AdamW([{"params": {a, b}}])
    # torch takes nesterov=1 for True; so does optjit (the program says true).
    o = ot.SGD([b], lr=0.1, momentum=0.9, nesterov=1)
    assert "nesterov=true" in o.pipeline


def test_a_parameter_that_changes_shape_is_an_error():
    m = torch.nn.Linear(4, 3)
    o = ot.AdamW(m.parameters(), lr=1e-2)
    m(torch.ones(2, 4)).sum().backward()
    o.step()
    m.weight.data = torch.zeros(6, 4)
    m.weight.grad = torch.zeros(6, 4)
    with pytest.raises(optjit.Error, match=r"cannot be rebound to an array of shape \[6, 4\]: "
                                           r"its shape is \[3, 4\] \(a new shape needs a new "
                                           r"optimizer\)"):
        o.step()


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_state_format_bf16_is_adamw_with_its_state_stored_in_bf16(backend):
    """state_format="bf16": the state tensors are bf16 (half the memory), and the result is
    torch's AdamW with its state rounded to bf16 after every step; a checkpoint continues
    exactly, and one from torch (state cast to the parameter's dtype) is converted."""
    def params():
        g = torch.Generator().manual_seed(7)
        return [torch.nn.Parameter(torch.randn(s, dtype=torch.float64, generator=g))
                for s in [(33, 5), (17,)]]
    def grads(step):
        g = torch.Generator().manual_seed(100 + step)
        return [torch.randn(s, dtype=torch.float64, generator=g) * 1e-2 for s in [(33, 5), (17,)]]
    kw = dict(lr=1e-2, betas=(0.9, 0.99), weight_decay=0.1)
    ref_ps, ps = params(), params()
    ref = torch.optim.AdamW(ref_ps, **kw)
    opt = ot.AdamW(ps, state_format="bf16", backend=backend, **kw)
    for step in range(6):
        for p, g in zip(ref_ps, grads(step)):
            p.grad = g.clone()
        ref.step()
        for p in ref_ps:  # the emulated format: stored in bf16
            for name in ("exp_avg", "exp_avg_sq"):
                ref.state[p][name].copy_(ref.state[p][name].to(torch.bfloat16).double())
        for p, g in zip(ps, grads(step)):
            p.grad = g.clone()
        opt.step()
    for a, b in zip(ref_ps, ps):
        assert torch.allclose(a, b, rtol=1e-12, atol=1e-15)
        for name in ("exp_avg", "exp_avg_sq"):
            ours = opt.state[b][name]
            assert ours.dtype == torch.bfloat16
            assert torch.equal(ours.double(), ref.state[a][name]), name
    # Mid-training checkpoint: optjit -> optjit continues bit for bit.
    sd = copy.deepcopy(opt.state_dict())
    saved = [p.detach().clone() for p in ps]
    more = [grads(10), grads(11)]
    for gs in more:
        for p, g in zip(ps, gs):
            p.grad = g.clone()
        opt.step()
    ps2 = [torch.nn.Parameter(t.clone()) for t in saved]
    opt2 = ot.AdamW(ps2, state_format="bf16", backend=backend, **kw)
    opt2.load_state_dict(sd)
    for gs in more:
        for p, g in zip(ps2, gs):
            p.grad = g.clone()
        opt2.step()
    for a, b in zip(ps, ps2):
        assert torch.equal(a, b)
    # torch's own AdamW loads it (as float64 state), and its state loads back as bf16.
    ref2 = torch.optim.AdamW([torch.nn.Parameter(t.clone()) for t in saved], **kw)
    ref2.load_state_dict(sd)
    assert all(v["exp_avg"].dtype == torch.float64 for v in ref2.state.values())
    opt3 = ot.AdamW([torch.nn.Parameter(t.clone()) for t in saved], state_format="bf16",
                    backend=backend, **kw)
    opt3.load_state_dict(ref2.state_dict())
    p3 = opt3.param_groups[0]["params"][0]
    for gs in more[:1]:
        for p, g in zip(opt3.param_groups[0]["params"], gs):
            p.grad = g.clone()
        opt3.step()
    assert opt3.state[p3]["exp_avg"].dtype == torch.bfloat16
    with pytest.raises(optjit.Error, match="'exp_avgg' is not a state of this transform"):
        ot.AdamW(params(), state_format="exp_avgg:bf16")


def test_state_format_bf16_sr_through_the_bridge_is_seeded_from_the_param_groups():
    """bf16_sr state through optjit.torch (the bridge once assumed every hyperparameter name
    has a transform prefix and failed on state_seed): bf16 tensors, the same bits run to run,
    the seed read from a param group like any hyperparameter, another seed other bits."""
    def run(seed):
        g = torch.Generator().manual_seed(3)
        w = torch.nn.Parameter(torch.randn(4097, generator=g))
        opt = ot.AdamW([{"params": [w], "state_seed": seed}], lr=1e-2, state_format="bf16_sr")
        for step in range(3):
            w.grad = torch.randn(4097, generator=g) * 1e-2
            opt.step()
        return w.detach().clone(), opt.state[w]["exp_avg"].clone()
    w0, m0 = run(0)
    assert m0.dtype == torch.bfloat16
    w0b, m0b = run(0)
    assert torch.equal(m0, m0b) and torch.equal(w0, w0b)
    _, m7 = run(7)
    assert not torch.equal(m0, m7)


def test_stochastic_param_rounding_keeps_updates_smaller_than_half_a_bf16_step():
    """bf16 parameters at 1.0 take 100 SGD steps of 1e-4 each, an eighth of bf16's step there
    (2^-7). Rounded to nearest, every update vanishes and the parameters stay 1.0; with
    param_rounding="stochastic" (torchao's bf16_stochastic_round, made deterministic) their
    mean is the exact 1.01 within 6 standard errors. An fp32 parameter in the same optimizer
    is torch's SGD exactly; a second run gives the same bits."""
    n = 1 << 20
    def run(mode):
        w = torch.nn.Parameter(torch.ones(n, dtype=torch.bfloat16))
        b = torch.nn.Parameter(torch.linspace(-1, 1, 33))
        opt = ot.SGD([w, b], lr=1e-4, param_rounding=mode)
        for _ in range(100):
            w.grad = -torch.ones_like(w)
            b.grad = torch.linspace(0, 1, 33)
            opt.step()
        return w.detach().double(), b.detach()
    w, _ = run("nearest")
    assert torch.equal(w, torch.ones(n, dtype=torch.float64))
    w, b = run("stochastic")
    ulp = 2.0 ** -7
    steps = (w - 1) / ulp  # how many times each element was rounded up: Binomial(100, q)
    assert torch.equal(steps, steps.round()) and steps.min().item() == 0
    q = 1e-4 / ulp
    sigma = math.sqrt(100 * q * (1 - q) / n) * ulp
    assert abs(w.mean().item() - 1.01) < 6 * sigma, (w.mean().item(), sigma)
    assert abs(steps.var().item() / (100 * q * (1 - q)) - 1) < 0.05  # independent draws
    ref = torch.nn.Parameter(torch.linspace(-1, 1, 33))
    sgd = torch.optim.SGD([ref], lr=1e-4)
    for _ in range(100):
        ref.grad = torch.linspace(0, 1, 33)
        sgd.step()
    assert torch.equal(b, ref.detach())
    w2, _ = run("stochastic")
    assert torch.equal(w, w2)
    with pytest.raises(ValueError, match="param_rounding"):
        ot.SGD([torch.nn.Parameter(torch.ones(2))], param_rounding="up")


def test_master_weights_keep_an_exact_f32_copy_of_bf16_parameters():
    """chain(master_weights(), adamw(state_format="f32")) on bf16 parameters is torch's AdamW
    on an fp32 copy: the master (optimizer.state[p]["master"], f32) follows torch's fp32
    AdamW to f32 rounding, and the bf16 parameters are the master rounded to nearest, every
    step."""
    g = torch.Generator().manual_seed(5)
    init = torch.randn(300, generator=g)
    grads = [torch.randn(300, generator=g) * 1e-2 for _ in range(8)]
    kw = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    ref = torch.nn.Parameter(init.to(torch.bfloat16).float())
    ref_opt = torch.optim.AdamW([ref], **kw)
    w = torch.nn.Parameter(init.to(torch.bfloat16))
    # The state in f32 too (by default it is stored as the parameters are: bf16).
    opt = ot.Optimizer([w], 'chain(master_weights(), adamw(state_format="f32"))', kw)
    for gr in grads:
        gb = gr.to(torch.bfloat16)  # the same (bf16) gradient for both
        ref.grad = gb.float()
        ref_opt.step()
        w.grad = gb
        opt.step()
        master = opt.state[w]["master"]
        assert master.dtype == torch.float32
        assert torch.allclose(master, ref.detach(), rtol=1e-6, atol=1e-9)
        assert torch.equal(w.detach(), master.to(torch.bfloat16))
    # Most bf16 steps of lr=1e-3 would vanish without the master; with it the parameters move.
    assert (w.detach() != init.to(torch.bfloat16)).float().mean() > 0.5
    with pytest.raises(optjit.Error, match="master_weights must come before every transform"):
        ot.Optimizer([w], "chain(adamw(), master_weights())", kw)


@pytest.mark.parametrize("three_phase", [False, True])
def test_one_cycle_ends_where_torchs_scheduler_raises(three_phase):
    """one_cycle_lr in a pipeline steps as far as torch's OneCycleLR lets a training loop
    step, with the same learning rates, and then raises torch's own message, before anything
    is written."""
    total = 6
    w = torch.nn.Parameter(torch.zeros(4, dtype=torch.float64))
    opt = torch.optim.SGD([w], lr=0.1)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.5, total_steps=total,
                                                cycle_momentum=False, three_phase=three_phase)
    torch_steps = 0
    with pytest.raises(ValueError) as torch_error:
        for _ in range(3 * total):
            w.grad = torch.ones(4, dtype=torch.float64)
            opt.step()
            torch_steps += 1
            sched.step()
    x = torch.zeros(4, dtype=torch.float64)
    e = optjit.Engine(f"sgd(lr=one_cycle_lr(max_lr=0.5, total_steps={total}, "
                      f"three_phase={'true' if three_phase else 'false'}))", ["w"], [x],
                      backend="reference")
    ours = 0
    with pytest.raises(optjit.Error) as our_error:
        for _ in range(3 * total):
            e.step([torch.ones(4, dtype=torch.float64)])
            ours += 1
    assert ours == torch_steps == total + 1
    assert str(torch_error.value) in str(our_error.value), our_error.value
    assert torch.allclose(x, w.detach(), rtol=1e-12, atol=0)  # same lrs, nothing after


@pytest.mark.parametrize("name", ["Lion", "LAMB"])
def test_lion_and_lamb_match_their_peers(name):
    if name == "Lion":
        peer = pytest.importorskip("lion_pytorch").Lion
        kw = dict(lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1)
    else:
        peer = pytest.importorskip("torch_optimizer").Lamb
        kw = dict(lr=1e-2, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01)
    shapes = [(5, 3), (7,), (2, 3, 4)]  # the peers take no 0-d or empty tensors
    def run_with(cls, dtype):
        g = torch.Generator().manual_seed(3)
        ps = [torch.nn.Parameter(torch.randn(s, dtype=torch.float64, generator=g).to(dtype))
              for s in shapes]
        opt = cls(ps, **kw)
        for k in range(5):
            for p, gr in zip(ps, grads_for(k, ps)):
                p.grad = gr
            opt.step()
        return ps
    p64, o64 = run_with(peer, torch.float64), run_with(getattr(ot, name), torch.float64)
    assert max_err(p64, o64) <= 1e-9
    p32, o32 = run_with(peer, torch.float32), run_with(getattr(ot, name), torch.float32)
    assert max_err(o32, p64) <= 1.5 * max_err(p32, p64) + 1e-7


def test_second_process_compiles_nothing_and_tune_works(tmp_path):
    import subprocess
    import sys
    import textwrap
    script = textwrap.dedent("""
        import torch, optjit.torch as ot
        w = torch.nn.Parameter(torch.ones(1000)); w.grad = torch.full((1000,), 0.5)
        opt = ot.AdamW([w], lr=0.1, max_grad_norm=1.0)
        opt.step()
        print(next(iter(opt._engines.values())).engine.kernels_from_cache)
    """)
    env = dict(__import__("os").environ, OPTJIT_CACHE_DIR=str(tmp_path / "cache"))
    runs = [subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                           text=True, check=True).stdout.split()[-1] for _ in range(2)]
    assert runs == ["False", "True"]


def test_a_cache_that_cannot_store_kernels_is_a_warning_and_the_steps_are_right(tmp_path):
    """A kernel cache on a full disk (here a 32 KiB file size limit: room for the database, not
    for many kernels): the kernels were silently not stored, so a cache meant to ship warm
    shipped cold. Now each optimizer that could not store its kernels gives a RuntimeWarning
    naming the cache, and steps exactly as one without a cache."""
    import subprocess
    import sys
    import textwrap
    script = textwrap.dedent("""
        import resource, signal, sys, warnings
        import torch, optjit.torch as ot
        if sys.argv[1] == "full":
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead
            resource.setrlimit(resource.RLIMIT_FSIZE, (32768, 32768))
        sums = []
        # (Eight programs of eight kernels: two, as before, fitted in the 32 KiB on a machine
        # whose kernels are small, and stored.)
        steps = ["adamw(lr=1e-2, weight_decay=0.1)", "adam(lr=1e-2, amsgrad=true)",
                 "lamb(lr=1e-2)", "lion(lr=1e-3)", "rmsprop(lr=1e-2, centered=true)",
                 "adagrad(lr=1e-2)", "nadam(lr=1e-2)", "radam(lr=1e-2)"]
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            for k, step in enumerate(steps):
                w = torch.nn.Parameter(torch.linspace(-1, 1, 1000))
                w.grad = torch.cos(w.detach())
                ot.Optimizer([w], f"chain(clip_grad_norm(max_norm={k + 1}.0), {step}, "
                                  f"sgd(lr=0.5, momentum=0.{k}))",
                             cache=sys.argv[1] == "full").step()
                sums.append(float(w.detach().double().sum()))
        for x in seen:
            print("warning:", x.category.__name__, x.message)
        print(sums)
    """)
    env = dict(__import__("os").environ, OPTJIT_CACHE_DIR=str(tmp_path / "cache"))
    subprocess.run([sys.executable, "-c", "import numpy, optjit; optjit.Engine('sgd()', ['w'], "
                    "[numpy.zeros(4, numpy.float32)])"], env=env, check=True)  # the schema
    full, none = (subprocess.run([sys.executable, "-c", script, mode], env=env,
                                 capture_output=True, text=True, check=True).stdout.splitlines()
                  for mode in ("full", "none"))
    assert full[-1] == none[-1] and len(none) == 1
    want = (f"warning: RuntimeWarning optjit: kernel cache {tmp_path / 'cache'}/kernels.sqlite: ")
    assert full[:-1] and all(line.startswith(want) and line.endswith(
        "; kernels compiled now are not stored and will be compiled again")
        for line in full[:-1]), full


def test_tune_from_python_restores_the_tensors():
    w = torch.nn.Parameter(torch.linspace(-1, 1, 5000))
    w.grad = torch.full((5000,), 0.25)
    opt = ot.AdamW([w], lr=0.1, cache=False)
    before = w.detach().clone()
    r = opt.tune(budget_seconds=2.0, max_candidates=3)
    assert r["measured"] >= 2 and r["winner"].startswith("threads=")
    assert torch.equal(w.detach(), before)
    opt.step()
    assert not torch.equal(w.detach(), before)


def test_pipeline_from_a_file_with_a_custom_transform(tmp_path):
    path = tmp_path / "signum.opt"
    path.write_text("transform signum(lr=1e-3, momentum=0.9) {\n"
                    "  state momentum_buffer = 0\n"
                    "  momentum_buffer = momentum * momentum_buffer + (1 - momentum) * grad\n"
                    "  param = param - lr * sign(momentum_buffer)\n}\nsignum(lr=0.5)\n")
    w = torch.nn.Parameter(torch.tensor([1.0, -1.0, 0.5], dtype=torch.float64))
    opt = ot.Optimizer([w], str(path), {"lr": 0.5})
    w.grad = torch.tensor([2.0, -3.0, 0.0], dtype=torch.float64)
    opt.step()
    assert w.tolist() == [0.5, -0.5, 0.5]
    assert set(opt.state[w]) == {"step", "momentum_buffer"}
    assert opt.state[w]["momentum_buffer"].tolist() == pytest.approx([0.2, -0.3, 0.0])


def test_tensors_optjit_cannot_step_are_clear_errors_not_copies():
    """A tensor on a device optjit has no backend for (meta here; the same path refuses any
    other) and a dtype it cannot step are errors naming the problem, raised by step()."""
    w = torch.nn.Parameter(torch.zeros(4, device="meta"))
    opt = ot.AdamW([w])
    w.grad = torch.zeros(4, device="meta")
    with pytest.raises(optjit.Error, match="optjit steps CPU and CUDA tensors, not meta ones"):
        opt.step()
    c = torch.nn.Parameter(torch.zeros(4, dtype=torch.float8_e4m3fn))
    opt = ot.AdamW([c])
    c.grad = torch.zeros(4, dtype=torch.float8_e4m3fn)
    with pytest.raises(optjit.Error, match=r"parameter 0 is torch.float8_e4m3fn: optjit steps "
                                           r"float32, float64, float16 and bfloat16 tensors"):
        opt.step()


@pytest.mark.parametrize("backend", ["cpu", "reference", "opencl"])
def test_master_weights_low16_keeps_the_master_exact_in_two_bytes(backend):
    """master_weights(low16=true), Transformer Engine's variant: the bf16 parameters are the
    f32 master's high half and its low 16 bits are state ('master_lo', uint16). The master they
    make together is bit for bit the f32 master that master_weights() keeps in 4 bytes, every
    step; the parameters are its truncation (the 4-byte variant rounds to nearest)."""
    g = torch.Generator().manual_seed(7)
    start = torch.randn(300, generator=g).to(torch.bfloat16)
    w16 = torch.nn.Parameter(start.clone())
    w32 = torch.nn.Parameter(start.clone())
    kw = dict(lr=1e-3, weight_decay=0.01)
    low = ot.Optimizer([w16], 'chain(master_weights(low16=true), adamw(state_format="f32"))', kw,
                       backend=backend)
    full = ot.Optimizer([w32], 'chain(master_weights(), adamw(state_format="f32"))', kw,
                        backend=backend)
    for k in range(6):
        gr = torch.randn(300, generator=g).to(torch.bfloat16)
        w16.grad, w32.grad = gr.clone(), gr.clone()
        low.step()
        full.step()
        lo = low.state_dict()["state"][0]["master_lo"]
        assert lo.dtype == torch.uint16
        hi = w16.detach().view(torch.int16).to(torch.int32) << 16
        master = (hi | (lo.view(torch.int16).to(torch.int32) & 0xffff)).view(torch.float32)
        want = full.state_dict()["state"][0]["master"]
        assert torch.equal(master, want), k
        trunc = (want.view(torch.int32) & ~0xffff).view(torch.float32).to(torch.bfloat16)
        assert torch.equal(w16.detach(), trunc)
        assert torch.equal(w32.detach(), want.to(torch.bfloat16))
    with pytest.raises(optjit.Error, match="beside bf16 parameters; these parameters are f32"):
        ot.Optimizer([torch.nn.Parameter(torch.zeros(3))],
                     "chain(master_weights(low16=true), sgd())", {}).step()


SPARSE_CASES = [("SGD", dict(lr=0.1)),
                ("SGD", dict(lr=0.02, momentum=0.9, nesterov=True, maximize=True)),
                ("Adagrad", dict(lr=0.1, lr_decay=0.1, initial_accumulator_value=0.1))]


def check_sparse_gradients(device, name, kw, clip):
    """nn.Embedding(sparse=True) beside dense layers on `device`: optjit's SGD or Adagrad steps
    its sparse gradients as torch's does; float64 to 1e-12, with the clip fused or torch's."""
    def run(mod):
        torch.manual_seed(0)
        e = torch.nn.Embedding(10, 3, sparse=True).double().to(device)
        lin = torch.nn.Linear(3, 2).double().to(device)
        ps = list(e.parameters()) + list(lin.parameters())
        extra = {"max_grad_norm": 0.5} if clip and mod is ot else {}
        o = getattr(mod, name)(ps, **kw, **extra)
        for i in range(4):
            o.zero_grad()
            lin(e(torch.tensor([1, 2, 2, 5 + i % 3], device=device))).square().sum().backward()
            assert e.weight.grad.is_sparse
            if clip and mod is not ot:
                # torch.nn.utils.clip_grad_norm_'s two steps; its norm kernel takes no sparse
                # tensor in some versions (torch 2.11: linalg_vector_norm on SparseCPU and
                # SparseCUDA), so a sparse gradient's norm is taken over its coalesced values.
                grads = [p.grad for p in ps]
                norm = torch.nn.utils.get_total_norm(
                    [g.coalesce().values() if g.is_sparse else g for g in grads])
                coef = torch.clamp(0.5 / (norm + 1e-6), max=1.0)
                for g in grads:
                    g.mul_(coef)
            o.step()
        return torch.cat([p.detach().flatten() for p in ps])

    want, got = run(torch.optim), run(ot)
    assert (want - run(torch.optim).zero_()).abs().max() > 0.1  # (it moved)
    assert (want - got).abs().max().item() <= 1e-12


@pytest.mark.parametrize("name,kw", SPARSE_CASES)
@pytest.mark.parametrize("clip", [False, True])
def test_sparse_gradients_step_as_in_torch(name, kw, clip):
    """SGD and Adagrad step sparse gradients as torch's do (optjit refused them)."""
    check_sparse_gradients("cpu", name, kw, clip)


def test_sparse_gradients_are_refused_where_torch_refuses_them():
    e = torch.nn.Embedding(10, 3, sparse=True)
    e(torch.tensor([1, 2])).sum().backward()
    with pytest.raises(optjit.Error, match=r"parameter 0 has a sparse gradient, which AdamW does "
                                           r"not step \(as torch's; torch.optim.SGD and Adagrad"):
        ot.AdamW(e.parameters()).step()
    with pytest.raises(optjit.Error, match=r"parameter 0 has a sparse gradient, which SGD steps "
                                           r"only without weight_decay \(as torch's\)"):
        ot.SGD(e.parameters(), lr=0.1, weight_decay=0.1).step()


COMPLEX_CASES = [("AdamW", dict(lr=0.1)), ("Adam", dict(lr=0.01, amsgrad=True)),
                  ("SGD", dict(lr=0.01, momentum=0.9, nesterov=True)), ("Adagrad", dict(lr=0.1)),
                  ("RMSprop", dict(lr=0.01, centered=True)), ("Rprop", dict(lr=0.01)),
                  ("NAdam", dict(lr=0.01)), ("RAdam", dict(lr=0.01)), ("Adamax", dict(lr=0.01)),
                  ("Adadelta", dict(lr=0.5)), ("ASGD", dict(lr=0.01))]


def check_complex_parameters(device, name, kw, clip):
    """Complex parameters (beside real ones) on `device` step as torch steps them, through
    their real views, with their state complex in optimizer.state as torch's; the fused 2-norm
    clip is torch's clip_grad_norm_ of complex gradients. float64 to 1e-12, and a torch
    checkpoint continues in optjit."""
    def make(mod):
        torch.manual_seed(0)
        w = torch.nn.Parameter(torch.randn(4, 3, dtype=torch.complex128).to(device))
        b = torch.nn.Parameter(torch.randn(3, dtype=torch.float64).to(device))
        # torch's for-loop step, the default on CPU tensors. Its foreach step (the default on
        # CUDA tensors) computes ASGD's eta from the float32 step count in float32, not in
        # float64 then rounded: an ulp of eta apart, 2.47e-10 in these parameters after four
        # steps (on the GPU, 2026-11-29; and so on the CPU with foreach=True).
        extra = {"foreach": False} if mod is torch.optim else {}
        if clip and mod is ot:
            extra = {"max_grad_norm": 0.5}
        return [w, b], getattr(mod, name)([w, b], **kw, **extra)

    x = torch.randn(5, 4, dtype=torch.complex128,
                    generator=torch.Generator().manual_seed(1)).to(device)

    def train(mod, ps, o, steps):
        for i in range(steps):
            o.zero_grad()
            ((x @ ps[0]).abs().square().sum() + (ps[1] * ps[1]).sum() * (i + 1)).backward()
            if clip and mod is not ot:
                torch.nn.utils.clip_grad_norm_(ps, 0.5)
            o.step()

    # (torch keeps NAdam's mu_product and ASGD's eta and mu in float32 even for float64
    # parameters, and so does optjit.torch: scalar_dtype="f32".)
    tol = 1e-12
    (pt, ot_), (po, oo) = make(torch.optim), make(ot)
    train(torch.optim, pt, ot_, 4)
    train(ot, po, oo, 4)
    assert max((a - b).abs().max().item() for a, b in zip(pt, po)) <= tol
    start = torch.randn(4, 3, dtype=torch.complex128, generator=torch.Generator().manual_seed(0))
    assert (pt[0].cpu() - start).abs().max() > 1e-3  # (it moved)
    for k, v in ot_.state[pt[0]].items():
        if k != "step" and v.dim() > 0:
            assert oo.state[po[0]][k].dtype == torch.complex128, k
            scale = max(1.0, v.abs().max().item())
            assert (oo.state[po[0]][k] - v).abs().max().item() <= tol * scale, k
    # torch's checkpoint, two more steps in optjit, against two more in torch.
    pc, oc = make(ot)
    with torch.no_grad():
        for a, b in zip(pc, pt):
            a.copy_(b)
    oc.load_state_dict(copy.deepcopy(ot_.state_dict()))
    train(torch.optim, pt, ot_, 2)
    train(ot, pc, oc, 2)
    assert max((a - b).abs().max().item() for a, b in zip(pt, pc)) <= tol


@pytest.mark.parametrize("name,kw", COMPLEX_CASES, ids=[c[0] for c in COMPLEX_CASES])
@pytest.mark.parametrize("clip", [False, True])
def test_complex_parameters_step_as_in_torch(name, kw, clip):
    """optjit refused complex parameters, naming a 'dtype code 5'."""
    check_complex_parameters("cpu", name, kw, clip)


def test_complex_parameters_with_another_clip_norm_are_an_error():
    w = torch.nn.Parameter(torch.randn(3, dtype=torch.complex64))
    w.grad = torch.ones_like(w)
    with pytest.raises(optjit.Error, match=r"complex parameters with max_grad_norm take "
                                           r"norm_type=2 only"):
        ot.AdamW([w], max_grad_norm=1.0, norm_type=float("inf")).step()


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, 0.5, math.inf, -1.0, -2.0])
def test_fused_clip_takes_torchs_norm_types(norm_type):
    """clip_grad_norm_'s norm_type through max_grad_norm, against torch in float64 (a zero
    gradient element in it: a negative order's norm is then 0). -inf was read as inf (the
    largest |g| where torch takes the least): a silently different clip."""
    torch.manual_seed(5)
    shapes = [(5, 3), (4,), (2, 2, 2)]
    ref = [torch.nn.Parameter(torch.randn(*s, dtype=torch.float64)) for s in shapes]
    ours = [torch.nn.Parameter(p.detach().clone()) for p in ref]
    opt = ot.AdamW(ours, lr=0.1, max_grad_norm=0.05, norm_type=norm_type)
    torch_opt = torch.optim.AdamW(ref, lr=0.1, foreach=False)
    for step in range(3):
        for a, b in zip(ours, ref):
            g = torch.randn_like(a) * 10 ** step
            if step == 1:
                g[(0,) * g.dim()] = 0.0
            a.grad, b.grad = g, g.clone()
        torch.nn.utils.clip_grad_norm_(ref, 0.05, norm_type)
        torch_opt.step()
        opt.step()
        for a, b in zip(ours, ref):
            torch.testing.assert_close(a.detach(), b.detach(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("norm_type", [-math.inf, 0.0])
def test_fused_clip_refuses_the_norm_types_it_does_not_provide(norm_type):
    w = torch.nn.Parameter(torch.randn(3))
    with pytest.raises(optjit.Error, match=r"clip_grad_norm: norm_type must be a nonzero number "
                                           rf"or inf, got {'-inf' if norm_type else '0'}$"):
        ot.AdamW([w], max_grad_norm=1.0, norm_type=norm_type)


def _train_in_fork(opt, params, conn):
    for k in range(2):
        for p in params:
            p.grad = torch.full_like(p, 0.1 * (k + 1))
        opt.step()
    conn.send([p.detach().numpy().tobytes() for p in params])  # (torch's own copies of
    conn.close()  # large tensors hang in a fork after torch ran them on threads: not sent)


def test_a_forked_process_trains_with_the_optimizer_its_parent_stepped():
    """multiprocessing forks by default on Linux: a child that went on training with an
    optimizer its parent had stepped waited forever (libgomp's threads do not survive fork;
    the parent's step ran on all cores). Small tensors: torch's own operations run on one
    thread, so that only optjit's step could hang."""
    import multiprocessing
    torch.manual_seed(2)
    params = [torch.nn.Parameter(torch.randn(30, 70)), torch.nn.Parameter(torch.randn(70))]
    ref = [torch.nn.Parameter(p.detach().clone()) for p in params]
    opt = ot.AdamW(params, lr=0.01, max_grad_norm=1.0)
    torch_opt = torch.optim.AdamW(ref, lr=0.01, foreach=False)
    for p, r in zip(params, ref):
        p.grad = torch.randn_like(p)
        r.grad = p.grad.clone()
    opt.step()
    torch.nn.utils.clip_grad_norm_(ref, 1.0)
    torch_opt.step()
    ctx = multiprocessing.get_context("fork")
    here, there = ctx.Pipe()
    child = ctx.Process(target=_train_in_fork, args=(opt, params, there), daemon=True)
    child.start()
    finished = here.poll(60)
    if not finished:
        child.kill()
    assert finished, "the forked process did not finish its steps"
    got = here.recv()
    child.join(10)
    assert child.exitcode == 0
    for k in range(2):
        for r in ref:
            r.grad = torch.full_like(r, 0.1 * (k + 1))
        torch.nn.utils.clip_grad_norm_(ref, 1.0)
        torch_opt.step()
    for g, r in zip(got, ref):
        g = torch.frombuffer(bytearray(g), dtype=torch.float32).view(r.shape)
        torch.testing.assert_close(g, r.detach(), rtol=0, atol=1e-6)


@pytest.mark.parametrize("clip", [False, True])
def test_a_model_moved_to_channels_last_between_steps_steps_on_as_torch(clip):
    """model.to(memory_format=torch.channels_last) after training started replaces each weight's
    memory by memory in another order: torch's step goes on; optjit's refused the new memory
    (it pairs state and parameter in memory order). A new engine now adopts the state in the
    parameters' new layout. float64 against torch's for-loop AdamW."""
    res = {}
    for mod in (torch.optim, ot):
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Conv2d(4, 2, 3)).double()
        kw = {"foreach": False} if mod is torch.optim else {"max_grad_norm": 0.5} if clip else {}
        o = mod.AdamW(m.parameters(), lr=0.1, **kw)
        x = torch.randn(2, 3, 9, 9, dtype=torch.float64)
        for k in range(5):
            if k == 2:
                m.to(memory_format=torch.channels_last)
                x = x.to(memory_format=torch.channels_last)
            m(x).square().sum().backward()
            if mod is torch.optim and clip:
                torch.nn.utils.clip_grad_norm_(m.parameters(), 0.5)
            o.step()
            o.zero_grad()
        res[mod] = (m, o)
    (a, ao), (b, bo) = res[torch.optim], res[ot]
    assert b[0].weight.stride() == (27, 1, 9, 3)  # it did move
    for pa, pb in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(pa.detach(), pb.detach(), rtol=1e-12, atol=1e-14)
        for name in ("exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(ao.state[pa][name], bo.state[pb][name], rtol=1e-12,
                                       atol=1e-16)
        assert float(bo.state[pb]["step"]) == 5.0
    # The low-level engine, which builds nothing itself, says what to do.
    w = torch.randn(4, 3, 3, 3)
    eng = optjit.Engine("sgd(lr=0.1)", ["w"], [w])
    with pytest.raises(optjit.Error, match=r"parameter 'w''s new array holds its elements in "
                                           r"another memory order .* needs a new optimizer"):
        eng.rebind_param(0, w.to(memory_format=torch.channels_last))


def test_parameters_that_swap_their_storage_step_on_as_torch():
    """a.data, b.data = b.data, a.data between steps (swapping weights in and out, an EMA
    swapped in for evaluation): rebinding one at a time found the first overlapping the
    second's old memory and refused. Also a whole model's memory replaced at once: rebound in
    O(n log n) (30,000 tensors took 4.5 s of pairwise checks)."""
    res = {}
    for mod in (torch.optim, ot):
        torch.manual_seed(0)
        a = torch.nn.Parameter(torch.randn(8, 3, dtype=torch.float64))
        b = torch.nn.Parameter(torch.randn(8, 3, dtype=torch.float64))
        c = torch.nn.Parameter(torch.randn(5, dtype=torch.float64))
        o = mod.AdamW([a, b, c], lr=0.1, **({"foreach": False} if mod is torch.optim else {}))
        for k in range(4):
            for p, s in ((a, 1.0), (b, -2.0), (c, 0.5)):
                p.grad = torch.full_like(p, s * (k + 1))
            o.step()
            with torch.no_grad():
                if k == 0:
                    a.data, b.data = b.data, a.data
                if k == 1:
                    for p in (a, b, c):
                        p.data = p.data.clone()
        res[mod] = [p.detach().clone() for p in (a, b, c)]
    for x, y in zip(res[torch.optim], res[ot]):
        torch.testing.assert_close(x, y, rtol=1e-14, atol=1e-14)
    # The low-level engine: all or nothing.
    x, y, spare = torch.ones(4), torch.full((4,), 2.0), torch.zeros(4)
    eng = optjit.Engine("sgd(lr=1.0)", ["x", "y"], [x, y])
    with pytest.raises(optjit.Error, match=r"^rebind_param: 'x' would overlap 'y'$"):
        eng.rebind_param(0, y)
    with pytest.raises(optjit.Error, match=r"^parameter 'y' cannot be rebound to a float64 array"):
        eng.rebind_params([(0, spare), (1, torch.zeros(4, dtype=torch.float64))])
    eng.rebind_params([(0, y), (1, x)])
    eng.step([torch.ones(4), torch.ones(4)])
    assert x.tolist() == [0.0] * 4 and y.tolist() == [1.0] * 4 and spare.tolist() == [0.0] * 4


@pytest.mark.parametrize("state_format,quant", [("8bit", "q8"), ("4bit", "q4")])
def test_quantized_state_follows_its_parameter_to_channels_last(state_format, quant):
    """Moving the model to channels_last after training started: 8-bit state was refused
    ("codes in another memory order"), and 4-bit state, whose codes are flat in the order
    they were stepped in, was silently paired with other elements of the weight. Its values
    are now requantized in the new order: with a zero gradient one step later exp_avg is
    beta1 times what it was, element by element, within the requantization's error (a
    mispairing is off by the values themselves)."""
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(64, 32, 3, 3))  # 18,432 elements: quantized
    o = ot.AdamW([w], lr=1e-3, betas=(0.9, 0.999), state_format=state_format)
    for _ in range(3):
        w.grad = torch.randn_like(w)
        o.step()
    st = o.state[w]
    before = ot._dequantize(quant, st["exp_avg"], st["exp_avg.absmax"], w.detach())
    w.data = w.data.to(memory_format=torch.channels_last)
    w.grad = torch.zeros_like(w)
    o.step()
    st = o.state[w]
    after = ot._dequantize(quant, st["exp_avg"], st["exp_avg.absmax"], w.detach())
    err = (after - 0.9 * before).abs()
    scale = before.abs().mean().item()
    assert err.mean().item() < (0.02 if quant == "q8" else 0.12) * scale, (err.mean(), scale)
    assert float(st["step"]) == 4.0


@pytest.mark.parametrize("saved_channels_last", [True, False])
def test_4bit_state_loads_into_the_model_in_another_memory_format(saved_channels_last):
    """4-bit codes are flat, in the memory order of the parameter they were stepped with: a
    checkpoint of a channels_last model loaded into a row-major one (or back) paired them with
    other elements, silently. state_dict() now records that order ("exp_avg.strides") and a
    load into another one takes their values in it. One zero-gradient step after loading,
    exp_avg is beta1 times the saved values, element by element, within requantization."""
    torch.manual_seed(0)
    fmt = (lambda t: t.to(memory_format=torch.channels_last)) if saved_channels_last else (
        lambda t: t.contiguous())
    other = (lambda t: t.contiguous()) if saved_channels_last else (
        lambda t: t.to(memory_format=torch.channels_last))
    w = torch.nn.Parameter(fmt(torch.randn(64, 32, 3, 3)))
    o = ot.AdamW([w], lr=1e-3, betas=(0.9, 0.999), state_format="4bit")
    for _ in range(3):
        w.grad = fmt(torch.randn(64, 32, 3, 3))
        o.step()
    sd = copy.deepcopy(o.state_dict())
    assert sd["state"][0]["exp_avg.strides"] == list(w.stride())
    saved = ot._dequantize("q4", sd["state"][0]["exp_avg"], sd["state"][0]["exp_avg.absmax"],
                           w.detach())
    v = torch.nn.Parameter(other(w.detach().clone()))
    assert v.stride() != w.stride()
    o2 = ot.AdamW([v], lr=1e-3, betas=(0.9, 0.999), state_format="4bit")
    o2.load_state_dict(sd)
    v.grad = torch.zeros_like(v)
    o2.step()
    st = o2.state[v]
    after = ot._dequantize("q4", st["exp_avg"], st["exp_avg.absmax"], v.detach())
    err = (after - 0.9 * saved).abs().mean().item()
    assert err < 0.12 * saved.abs().mean().item(), (err, saved.abs().mean().item())


def test_4bit_codes_with_strides_that_do_not_fit_their_parameter_are_an_error():
    w = torch.nn.Parameter(torch.randn(64, 32, 3, 3))
    o = ot.AdamW([w], state_format="4bit")
    w.grad = torch.randn_like(w)
    o.step()
    sd = copy.deepcopy(o.state_dict())
    for bad in ([288, 9, 3], [288, 9, 3, 2], [1, 1, 1, 1]):
        sd["state"][0]["exp_avg.strides"] = bad
        v = torch.nn.Parameter(w.detach().clone())
        v.grad = torch.randn_like(v)
        o2 = ot.AdamW([v], state_format="4bit")
        o2.load_state_dict(copy.deepcopy(sd))
        with pytest.raises(optjit.Error, match=re.escape(
                f"the state dict's exp_avg.strides of parameter 0 are {bad}, which do not lay "
                f"out its shape [64, 32, 3, 3] densely")):
            o2.step()
    sd["state"][0]["exp_avg.strides"] = "row-major"
    with pytest.raises(optjit.Error, match="is 'row-major', not a list of strides"):
        ot.AdamW([torch.nn.Parameter(w.detach().clone())],
                 state_format="4bit").load_state_dict(sd)


def test_4bit_state_of_a_moved_parameter_met_by_a_new_engine():
    """A weight moved to channels_last, then stepped with another set of parameters than
    before (the other one's gradient None): the engine for that set is new and never saw the
    old layout. The codes' order is the state's own (recorded when they were bound), so it
    too takes their values in that order (it paired them with other elements: 125% off)."""
    torch.manual_seed(0)
    a = torch.nn.Parameter(torch.randn(64, 32, 3, 3))
    b = torch.nn.Parameter(torch.randn(300, 50))
    o = ot.AdamW([a, b], lr=1e-3, betas=(0.9, 0.999), state_format="4bit")
    for _ in range(3):
        a.grad, b.grad = torch.randn_like(a), torch.randn_like(b)
        o.step()
    st = o.state[a]
    before = ot._dequantize("q4", st["exp_avg"], st["exp_avg.absmax"], a.detach())
    a.data = a.data.to(memory_format=torch.channels_last)
    a.grad, b.grad = torch.zeros_like(a), None
    o.step()
    st = o.state[a]
    after = ot._dequantize("q4", st["exp_avg"], st["exp_avg.absmax"], a.detach())
    err = (after - 0.9 * before).abs().mean().item()
    assert err < 0.12 * before.abs().mean().item(), (err, before.abs().mean().item())


_COPIERS = {"deepcopy": copy.deepcopy,
            "pickle": lambda x: pickle.loads(pickle.dumps(x))}


def _q4_ratio(before, st, p):
    """How far exp_avg (4-bit) is from beta1 times `before`, relative to `before`."""
    after = ot._dequantize("q4", st["exp_avg"], st["exp_avg.absmax"], p.detach())
    return (after - 0.9 * before).abs().mean().item() / before.abs().mean().item()


@pytest.mark.parametrize("copier", sorted(_COPIERS))
def test_a_copy_knows_the_memory_order_of_its_4bit_codes(copier):
    """The memory order flat 4-bit codes were stepped in was keyed by id(p) and dropped by
    copy.deepcopy and pickle: a copy taken after moving the model to channels_last paired the
    codes with other elements of the weight (126% off, silently). One zero-gradient step
    later, exp_avg is beta1 times what it was, within the requantization's error."""
    torch.manual_seed(0)
    a = torch.nn.Parameter(torch.randn(64, 32, 3, 3))
    o = ot.AdamW([a], lr=1e-3, betas=(0.9, 0.999), state_format="4bit")
    for _ in range(3):
        a.grad = torch.randn_like(a)
        o.step()
    before = ot._dequantize("q4", o.state[a]["exp_avg"], o.state[a]["exp_avg.absmax"],
                            a.detach())
    a.data = a.data.to(memory_format=torch.channels_last)
    a2, o2 = _COPIERS[copier]((a, o))
    a2.grad = torch.zeros_like(a2)
    o2.step()
    assert _q4_ratio(before, o2.state[a2], a2) < 0.12


@pytest.mark.parametrize("copier", sorted(_COPIERS))
def test_a_copy_knows_the_format_of_codes_it_loaded(copier):
    """The format of loaded codes not yet stepped was dropped by copy.deepcopy and pickle as
    well: a copy taken after loading 8-bit codes into 4-bit state refused them as 'a
    checkpoint of another model or state_format'. Now they step as in the original."""
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(256, 64))
    o = ot.AdamW([w], lr=1e-3, betas=(0.9, 0.999), state_format="8bit")
    for _ in range(3):
        w.grad = torch.randn_like(w)
        o.step()
    sd = copy.deepcopy(o.state_dict())
    before = ot._dequantize("q8", sd["state"][0]["exp_avg"], sd["state"][0]["exp_avg.absmax"],
                            w.detach())
    v = torch.nn.Parameter(w.detach().clone())
    o2 = ot.AdamW([v], lr=1e-3, betas=(0.9, 0.999), state_format="4bit")
    o2.load_state_dict(sd)
    v2, o3 = _COPIERS[copier]((v, o2))
    v2.grad = torch.zeros_like(v2)
    o3.step()
    assert _q4_ratio(before, o3.state[v2], v2) < 0.2


def test_jax_arrays_are_read_as_gradients_and_refused_as_parameters():
    """With JAX itself: a JAX parameter was changed in place under JAX (which assumes its
    arrays never change); now refused, while JAX gradients step NumPy parameters as NumPy's."""
    jnp = pytest.importorskip("jax.numpy")
    np = pytest.importorskip("numpy")
    w = jnp.linspace(-1, 1, 8, dtype=jnp.float32)
    before = np.array(w)
    with pytest.raises(optjit.Error, match="parameter 'w' is a JAX array, which is immutable"):
        optjit.Engine("sgd(lr=0.5)", ["w"], [w]).step([jnp.ones(8, jnp.float32)])
    assert np.array_equal(np.asarray(w), before)
    a, b = (np.linspace(-1, 1, 8, dtype=np.float32) for _ in range(2))
    ea, eb = (optjit.Engine("adamw(lr=0.1)", ["w"], [x]) for x in (a, b))
    for k in range(3):
        g = jnp.cos(jnp.arange(8, dtype=jnp.float32) * (k + 1))
        ea.step([g])
        eb.step([np.asarray(g).copy()])
    assert np.array_equal(a, b) and not np.array_equal(a, np.linspace(-1, 1, 8, dtype=np.float32))


def _example(name):
    """The path of a shipped example pipeline (examples/pipelines/NAME)."""
    import pathlib
    return str(pathlib.Path(__file__).resolve().parents[2] / "examples/pipelines" / name)


def _steps_beside_peer(theirs, ours, steps=12):
    """Steps the peer optimizer and optjit's (each made by a function of the parameters) on the
    same seeded parameters of four shapes (a 0-d one among them) and random gradients, in
    float64 and float32. Returns their parameters and optimizers, the parameters at the
    start, and err(ps): the largest difference of ps from the peer's float64 parameters."""
    torch.manual_seed(0)
    shapes = [(64, 32), (32,), (10, 64), ()]
    init = [torch.randn(s, dtype=torch.float64) for s in shapes]
    grads = [[torch.randn(s, dtype=torch.float64) for s in shapes] for _ in range(steps)]

    def run(make, dtype):
        ps = [torch.nn.Parameter(p.clone().to(dtype)) for p in init]
        o = make(ps)
        for gs in grads:
            for p, g in zip(ps, gs):
                p.grad = g.to(dtype).clone()
            o.step()
        return ps, o

    r = types.SimpleNamespace(init=init)
    r.ref, r.ro = run(theirs, torch.float64)
    r.ref32, _ = run(theirs, torch.float32)
    r.got, r.go = run(ours, torch.float64)
    r.got32, _ = run(ours, torch.float32)
    r.err = lambda ps: max((p.detach().double() - q).abs().max().item()
                           for p, q in zip(ps, r.ref))
    r.moved = max((q - p).abs().max().item() for q, p in zip(r.ref, init))
    return r


def test_prodigy_written_in_the_text_form_steps_as_prodigyopt():
    """A custom optimizer no built-in covers, declared in the text form
    (examples/pipelines/prodigy.opt) and checked against its authors' package: Prodigy's p0
    is a state that starts from the parameters (`state p0 = param`), its d a per-group scalar
    fed by global sums, and a first step without gradient leaves everything as it was, as
    prodigyopt returns before any update. float64 to 1e-9 of the largest move; float32 no
    less accurate than prodigyopt's own float32, both against prodigyopt's float64."""
    prodigyopt = pytest.importorskip("prodigyopt")
    path = _example("prodigy.opt")
    torch.manual_seed(0)
    shapes = [(64, 32), (32,), (10, 64), ()]
    init = [torch.randn(s, dtype=torch.float64) for s in shapes]
    target = [3 * torch.randn(s, dtype=torch.float64) for s in shapes]

    def run(make, dtype, steps=12):
        ps = [torch.nn.Parameter(p.clone().to(dtype)) for p in init]
        o = make(ps)
        for k in range(steps):
            for p, t in zip(ps, target):  # a curved bowl, so that d grows (1e-6 -> 0.01)
                p.grad = (p.detach() - t.to(dtype)) * (1 + p.detach() ** 2) * (k > 0)
            o.step()
        return ps, o

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # prodigyopt prints and warns about its defaults
        ref, ro = run(lambda ps: prodigyopt.Prodigy(ps, lr=1.0, weight_decay=0.01),
                      torch.float64)
        ref32, _ = run(lambda ps: prodigyopt.Prodigy(ps, lr=1.0, weight_decay=0.01),
                       torch.float32)
    got, go = run(lambda ps: ot.Optimizer(ps, path), torch.float64)
    got32, _ = run(lambda ps: ot.Optimizer(ps, path), torch.float32)

    def err(ps):
        return max((p.detach().double() - r).abs().max().item() for p, r in zip(ps, ref))

    moved = max((r - p).abs().max().item() for r, p in zip(ref, init))
    assert ro.param_groups[0]["d"] > 5e-3 and moved > 0.02
    assert float(go.state[got[0]]["d"]) == pytest.approx(ro.param_groups[0]["d"], rel=1e-6)
    assert err(got) <= 1e-9 * moved
    assert err(got32) <= 1.5 * err(ref32) + 1e-7
    # p0 is where the parameters were when the first step ran (the skipped one included).
    assert all(torch.equal(go.state[p]["p0"], q) for p, q in zip(got, init))


def test_schedule_free_adamw_written_in_the_text_form_steps_as_schedulefree():
    """Schedule-Free AdamW (examples/pipelines/schedule_free.opt) against its authors' package
    in train mode, the parameters holding y: z starts as the parameters, lr_max and the weight
    sum are per-group scalars (two groups with their own lr and weight decay here), and the
    warmup of lr runs over the first 4 of 12 steps. float64 to 1e-9 of the largest move;
    float32 no less accurate than schedulefree's own float32, both against its float64."""
    schedulefree = pytest.importorskip("schedulefree")

    def groups(ps, **first):
        return [dict(params=ps[:2], **first), dict(params=ps[2:], lr=0.01, weight_decay=0.0)]

    def theirs(ps):
        o = schedulefree.AdamWScheduleFree(groups(ps, weight_decay=0.1), lr=0.05,
                                           warmup_steps=4)
        o.train()
        return o

    r = _steps_beside_peer(theirs, lambda ps: ot.Optimizer(
        groups(ps, weight_decay=0.1), _example("schedule_free.opt"), dict(lr=0.05, warmup_steps=4)))
    assert r.moved > 0.1
    assert r.err(r.got) <= 1e-9 * r.moved
    assert r.err(r.got32) <= 1.5 * r.err(r.ref32) + 1e-7
    for p, q in zip(r.got, r.ref):  # z, and the per-group scalars
        assert torch.allclose(r.go.state[p]["z"], r.ro.state[q]["z"], rtol=0, atol=1e-9 * r.moved)
    for g in range(2):
        p = r.got[0 if g == 0 else 2]
        assert float(r.go.state[p]["lr_max"]) == pytest.approx(r.ro.param_groups[g]["lr_max"])
        assert float(r.go.state[p]["weight_sum"]) == pytest.approx(
            r.ro.param_groups[g]["weight_sum"], rel=1e-12)


def test_madgrad_written_in_the_text_form_steps_as_torch_optimizers():
    """MADGRAD (examples/pipelines/madgrad.opt) against torch_optimizer.MADGRAD, with momentum
    and weight decay: x0 starts as the parameters, the dual average and the cube-root scaling
    grow with sqrt(step). 12 steps, two groups (the second with its own lr and no decay).
    float64 to 1e-9 of the largest move; float32 no less accurate than torch_optimizer's own
    float32, both against its float64."""
    import torch_optimizer

    def groups(ps):
        return [dict(params=ps[:2], weight_decay=0.01),
                dict(params=ps[2:], lr=0.03, weight_decay=0.0)]

    r = _steps_beside_peer(
        lambda ps: torch_optimizer.MADGRAD(groups(ps), lr=0.01, momentum=0.9),
        lambda ps: ot.Optimizer(groups(ps), _example("madgrad.opt"), dict(lr=0.01, momentum=0.9)))
    assert r.moved > 0.05
    assert r.err(r.got) <= 1e-9 * r.moved
    assert r.err(r.got32) <= 1.5 * r.err(r.ref32) + 1e-7
    for p, q in zip(r.got, r.ref):
        for name in ("s", "grad_sum_sq", "x0"):
            assert torch.allclose(r.go.state[p][name], r.ro.state[q][name], rtol=1e-12, atol=0)


def test_lookahead_written_in_the_text_form_steps_as_torch_optimizers():
    """Lookahead around AdamW (examples/pipelines/lookahead.opt), one fused pass of 36 bytes
    per parameter, against torch_optimizer.Lookahead(torch.optim.AdamW(...)): its slow weights
    start from the parameters after the first inner step (`state slow_param = param` after
    adamw in the chain) and its counter is a per-group scalar. 12 steps, so that the slow
    weights sync three times."""
    import torch_optimizer
    r = _steps_beside_peer(
        lambda ps: torch_optimizer.Lookahead(torch.optim.AdamW(ps, lr=1e-3, weight_decay=0.01),
                                             k=5, alpha=0.5),
        lambda ps: ot.Optimizer(ps, _example("lookahead.opt")))
    assert r.err(r.got) <= 1e-12
    assert r.err(r.got32) <= 1.5 * r.err(r.ref32) + 1e-7
    for p, q in zip(r.got, r.ref):
        assert (r.go.state[p]["slow_param"] - r.ro.state[q]["slow_param"]).abs().max() <= 1e-12
    assert not torch.equal(r.ro.state[r.ref[0]]["slow_param"], r.init[0])  # it synced


@pytest.mark.parametrize("make", [
    lambda ps: ot.Optimizer(ps, _example("prodigy.opt")),
    lambda ps: ot.NAdam(ps, lr=1e-2),
    lambda ps: ot.ASGD(ps, lr=1e-2, t0=2),
], ids=["prodigy", "nadam", "asgd"])
def test_scalar_states_continue_bit_for_bit_from_a_checkpoint(make):
    """Per-group scalar states (Prodigy's d, NAdam's mu_product, ASGD's eta and mu) were put in
    optimizer.state as float32 tensors, as torch keeps its own, while the engine steps them in
    float64: a save and load rounded them, and the run continued elsewhere (Prodigy: 5.6e-11
    after five more steps). Now float64: equal bit for bit to the run never interrupted."""
    torch.manual_seed(0)
    init = [torch.randn(64, 32, dtype=torch.float64), torch.randn(32, dtype=torch.float64)]
    target = [3 * torch.randn_like(p) for p in init]

    def steps(ps, o, n):
        for _ in range(n):
            for p, t in zip(ps, target):
                p.grad = (p.detach() - t) * (1 + p.detach() ** 2)
            o.step()

    whole = [torch.nn.Parameter(p.clone()) for p in init]
    steps(whole, make(whole), 10)
    first = [torch.nn.Parameter(p.clone()) for p in init]
    o = make(first)
    steps(first, o, 5)
    saved = pickle.loads(pickle.dumps(o.state_dict()))  # as torch.save and torch.load would
    resumed = [torch.nn.Parameter(p.detach().clone()) for p in first]
    o2 = make(resumed)
    o2.load_state_dict(saved)
    steps(resumed, o2, 5)
    assert all(torch.equal(a, b) for a, b in zip(whole, resumed))


def test_an_optimizer_alive_at_exit_is_not_reported_as_leaked():
    """A program that ends with an optimizer still alive where the interpreter tears down
    modules (a step hook registered with torch keeps the script's globals, and with them the
    optimizer, until torch's module goes): its engines are freed at exit while the
    interpreter is whole. Freed later, nanobind printed "leaked 1 instances!", "this is
    likely caused by a reference counting issue in the binding code" and every binding's
    name after each such run."""
    import subprocess
    import sys

    code = """
import torch, optjit.torch as ot
from torch.optim.optimizer import register_optimizer_step_pre_hook
register_optimizer_step_pre_hook(lambda o, a, k: None)
m = torch.nn.Linear(8, 4)
opt = ot.AdamW(m.parameters(), lr=1e-2)
m(torch.randn(3, 8)).sum().backward()
opt.step()
print("stepped")
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0 and run.stdout.strip() == "stepped", run.stderr
    assert "leaked" not in run.stderr, run.stderr


@pytest.mark.parametrize("state_format", [None, "8bit"])
def test_steps_from_several_threads_run_one_after_another(state_format):
    """An optimizer stepped from four threads at once (its engines release the GIL) while a
    fifth takes state dicts: every step is taken, as the same steps taken one by one. The first
    steps raced before: a thread bound state another was still making ("has exp_avg but not
    exp_avg_sq: a damaged or mismatched checkpoint") and half the steps were lost."""
    import threading

    def model():
        torch.manual_seed(0)
        ps = [torch.nn.Parameter(torch.randn(70000)), torch.nn.Parameter(torch.randn(300, 7))]
        for p in ps:
            p.grad = torch.randn(p.shape)
        return ps

    kw = {} if state_format is None else {"state_format": state_format}
    serial = model()
    o = ot.AdamW(serial, lr=1e-2, **kw)
    for _ in range(80):
        o.step()
    ps = model()
    shared = ot.AdamW(ps, lr=1e-2, **kw)
    errors, go = [], threading.Barrier(5)

    def stepper():
        go.wait()
        try:
            for _ in range(20):
                shared.step()
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    def saver():
        go.wait()
        try:
            for _ in range(20):
                shared.state_dict()
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=f) for f in (stepper,) * 4 + (saver,)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert shared.state_dict()["state"][0]["step"].item() == 80
    for a, b in zip(serial, ps):
        assert torch.equal(a, b)
    assert torch.equal(o.state_dict()["state"][1]["exp_avg"],
                       shared.state_dict()["state"][1]["exp_avg"])


@pytest.mark.parametrize("default", [torch.float32, torch.float64])
@pytest.mark.parametrize("name,kw", [
    ("NAdam", {"lr": 0.02}),
    ("NAdam", {"lr": 0.02, "weight_decay": 0.1, "decoupled_weight_decay": True}),
    ("ASGD", {"lr": 0.02}),
    ("ASGD", {"lr": 0.05, "lambd": 0.01, "alpha": 0.5, "t0": 2}),
])
def test_scalar_states_are_kept_in_torchs_scalar_dtype(name, kw, default):
    """torch keeps NAdam's mu_product and ASGD's eta and mu in 0-dim tensors of its scalar
    dtype: float32 unless its default dtype is float64, float64 parameters or not. optjit kept
    them in float64 for float64 parameters, whose steps then parted from torch's by up to
    4e-10 (1000 of 1000 elements after 8 NAdam steps); now an ulp in a few elements."""
    torch.set_default_dtype(default)
    try:
        def run(cls, **extra):
            g = torch.Generator().manual_seed(0)
            p = torch.nn.Parameter(torch.randn(1000, dtype=torch.float64, generator=g))
            o = cls([p], **kw, **extra)
            for k in range(8):
                p.grad = torch.randn(1000, dtype=torch.float64, generator=g)
                if k == 4:
                    o.param_groups[0]["lr"] *= 0.5  # (ASGD's next eta starts from it)
                o.step()
            return p.detach(), o

        want, theirs = run(getattr(torch.optim, name), foreach=False)
        got, ours = run(getattr(ot, name))
        assert (got - want).abs().max().item() <= 1e-15 * want.abs().max().item()
        for k, v in theirs.state[theirs.param_groups[0]["params"][0]].items():
            if v.dim() == 0 and k != "step":
                # (optjit.torch holds them in float64, which keeps the value exactly)
                assert ours.state[ours.param_groups[0]["params"][0]][k].item() == v.item(), k
    finally:
        torch.set_default_dtype(torch.float32)


@pytest.mark.parametrize("clip", [False, True])
def test_parameters_whose_scalar_states_differ_step_apart(clip):
    """torch keeps ASGD's eta per parameter: a parameter without a gradient at the step where
    the lr changed keeps the old one. Stepped later beside parameters of the same step count
    and another eta, optjit's engine (one eta per group) stepped it with theirs: the 0-d
    parameter below parted from torch by 1.5e-3."""
    shapes = [(3,), (), (4,), (2,)]
    has_grad = [[0, 1, 0, 1], [1, 0, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1]]

    def run(cls, **kw):
        g = torch.Generator().manual_seed(3)
        ps = [torch.nn.Parameter(torch.randn(s, dtype=torch.float64, generator=g))
              for s in shapes]
        o = cls(ps, t0=100, **kw)
        for k, on in enumerate(has_grad):
            for p, a in zip(ps, on):
                p.grad = torch.randn(p.shape, dtype=torch.float64, generator=g) if a else None
            if k == 1:
                o.param_groups[0]["lr"] *= 2
            if clip and cls is torch.optim.ASGD:
                torch.nn.utils.clip_grad_norm_([p for p in ps if p.grad is not None], 0.5)
            o.step()
        return ps, o

    want, theirs = run(torch.optim.ASGD, foreach=False)
    got, ours = run(ot.ASGD, **({"max_grad_norm": 0.5} if clip else {}))
    for a, b in zip(want, got):
        assert (a - b).abs().max().item() <= 1e-15 * max(1.0, a.abs().max().item())
    for a, b in zip(want, got):
        assert ours.state[b]["eta"].item() == theirs.state[a]["eta"].item()


@pytest.mark.parametrize("backend", ["opencl", "webgpu"])
def test_device_kept_state_follows_parameters_that_lose_their_gradients(backend):
    """OpenCL and WebGPU step CPU tensors on their device and keep the state there between
    steps. When the set of parameters with gradients changed, the next step's engines read the
    torch tensors, which still held the state of before the last engines' steps; and an
    engine used again stepped its old copies: Adam's parameters parted from torch by 0.07
    after a parameter had no gradient for one step. state_dict() and copies synced every engine
    ever made, older ones over newer values. And optimizer.state itself held the values of
    before the first step (0.22 off), and what the user changed there in place was not seen."""
    has_grad = [[1, 1, 1], [1, 0, 1], [0, 1, 1], [1, 1, 1], [1, 1, 0], [1, 1, 1]]

    def run(**kw):
        g = torch.Generator().manual_seed(0)
        ps = [torch.nn.Parameter(torch.randn(s, generator=g)) for s in [(5, 3), (7,), (2, 2)]]
        o = ot.Adam(ps, lr=0.1, **kw)
        dicts, seen = [], []
        for k, on in enumerate(has_grad):
            for p, a in zip(ps, on):
                p.grad = torch.randn(p.shape, generator=g) if a else None
            o.step()
            seen.append([o.state[p]["exp_avg_sq"].clone() for p in ps if p in o.state])
            if k == 3:
                o.state[ps[0]]["exp_avg"].mul_(-1.0)  # (torch's step reads it as it is now)
            dicts.append(copy.deepcopy(o.state_dict()["state"]))
        return ps, dicts, copy.deepcopy(o), seen

    want, want_dicts, _, want_seen = run(backend="cpu")
    got, got_dicts, got_copy, got_seen = run(backend=backend)
    for a, b in zip(want, got):
        assert torch.equal(a, b)
    for a, b in zip(want_seen, got_seen):
        assert all(torch.equal(x, y) for x, y in zip(a, b))
    for wd, gd in zip(want_dicts, got_dicts):
        for i in wd:
            for k in ("exp_avg", "exp_avg_sq", "step"):
                assert torch.equal(wd[i][k], gd[i][k]), (i, k)
    copied = got_copy.state_dict()["state"]
    for i in want_dicts[-1]:
        assert torch.equal(copied[i]["exp_avg"], want_dicts[-1][i]["exp_avg"])


@pytest.mark.parametrize("backend", ["cpu", "opencl"])
@pytest.mark.parametrize("name,key", [("Adam", "step"), ("NAdam", "mu_product"), ("ASGD", "eta")])
def test_step_counts_and_scalar_states_changed_in_place_are_what_the_next_step_uses(
        name, key, backend):
    """``optimizer.state[p]["step"].fill_(0)`` (restarting Adam's bias correction) or a scalar
    state changed in place: torch's next step reads it; optjit's engine kept stepping its own
    count (0.1 off torch after two more Adam steps). Here for one parameter of two, which then
    step apart."""
    res = []
    for cls, kw in ((getattr(torch.optim, name), {"foreach": False}),
                    (getattr(ot, name), {"backend": backend})):
        g = torch.Generator().manual_seed(0)
        ps = [torch.nn.Parameter(torch.randn(5, dtype=torch.float64, generator=g))
              for _ in range(2)]
        o = cls(ps, lr=0.05, **kw)
        for k in range(4):
            for p in ps:
                p.grad = torch.randn(5, dtype=torch.float64, generator=g)
            o.step()
            if k == 1:
                o.state[ps[0]][key].mul_(0.5)
        res.append((ps, [o.state[p][key].item() for p in ps]))
    (want, want_state), (got, got_state) = res
    for a, b in zip(want, got):
        assert (a - b).abs().max().item() <= 1e-15
    assert want_state == got_state


def test_layers_dropped_at_random_keep_a_bounded_set_of_engines():
    """Layers dropped at random (LayerDrop, stochastic depth) give another set of parameters
    gradients nearly every step, and the optimizer made an engine for each set and kept it for
    good: memory grew with every step (and, while each engine had a JIT of its own, mappings,
    up to the process's limit). The engines of sets not stepped for longest go now; the steps
    stay torch's."""
    def run(cls, **kw):
        g = torch.Generator().manual_seed(0)
        ps = [torch.nn.Parameter(torch.randn(6, generator=g, dtype=torch.float64))
              for _ in range(14)]
        o = cls(ps, lr=1e-2, **kw)
        rng = torch.Generator().manual_seed(1)
        for _ in range(120):
            keep = torch.rand(len(ps), generator=rng) < 0.7
            for p, k in zip(ps, keep.tolist()):
                p.grad = torch.randn(6, generator=g, dtype=torch.float64) if k else None
            o.step()
        return ps, o

    want, _ = run(torch.optim.AdamW, foreach=False)
    got, o = run(ot.AdamW)
    assert len(o._engines) <= 32
    for a, b in zip(want, got):
        assert (a - b).abs().max().item() <= 1e-15


def test_dropped_engines_leave_their_codes_format_in_state_dict():
    """add_param_group drops the engines; state_dict() then wrote 8-bit codes without their
    format until the next step, a checkpoint that another state_format refused ("holds
    quantized codes ... but this optimizer keeps it as f32")."""
    p, q = (torch.nn.Parameter(torch.randn(5000)) for _ in range(2))
    o = ot.AdamW([p], lr=1e-3, state_format="8bit")
    p.grad = torch.randn(5000)
    o.step()
    o.add_param_group({"params": [q]})
    sd = o.state_dict()
    assert sd["state"][0]["exp_avg.format"] == "q8"
    assert sd["state"][0]["exp_avg_sq.format"] == "q8u"
    r = torch.nn.Parameter(p.detach().clone())
    o2 = ot.AdamW([r], lr=1e-3, state_format="bf16")
    o2.load_state_dict({"state": {0: sd["state"][0]}, "param_groups": sd["param_groups"][:1]})
    r.grad = p.grad.clone()
    o2.step()
    assert o2.state[r]["exp_avg"].dtype == torch.bfloat16


def test_zero_dim_parameters_moments_are_not_scalar_states(tmp_path, monkeypatch):
    """A 0-d parameter (a learned temperature, a gate) has 0-d moments. Taken for scalar
    states (one value per group in an engine, like ASGD's eta), every such parameter stepped
    in an engine of its own once the engines were rebuilt: tune() refused ("one device with one
    step count"), the built-ins' fused clip fell back to torch's, and a pipeline text that
    clips refused to step at all (first seen on CUDA tensors, 2026-11-29)."""
    text = "chain(clip_grad_norm(max_norm=0.5), adamw(lr=0.01, weight_decay=0.1))"

    def params():
        g = torch.Generator().manual_seed(7)
        return [torch.nn.Parameter(torch.randn(s, dtype=torch.float64, generator=g))
                for s in [(3, 4), (), (5,), ()]]

    def grads(k, ps):
        g = torch.Generator().manual_seed(100 + k)
        return [torch.randn(p.shape, dtype=torch.float64, generator=g) for p in ps]

    want = params()
    theirs = torch.optim.AdamW(want, lr=0.01, weight_decay=0.1, foreach=False)
    fused, given = params(), params()
    ours = [ot.AdamW(fused, lr=0.01, weight_decay=0.1, max_grad_norm=0.5),
            ot.Optimizer(given, text)]
    for k in range(4):
        for ps in (want, fused, given):
            for p, g in zip(ps, grads(k, ps)):
                p.grad = g
        torch.nn.utils.clip_grad_norm_(want, 0.5)
        theirs.step()
        for o in ours:
            if k == 2:  # engines made anew from the state, whose 0-d moments now differ
                o.load_state_dict(o.state_dict())
            o.step()
            assert len(o._last) == 1 and not o._split
    for ps in (fused, given):
        for a, b in zip(want, ps):
            assert (a - b).abs().max().item() <= 1e-14, (a, b)
    monkeypatch.setenv("OPTJIT_CACHE_DIR", str(tmp_path))  # no decision stored yet
    r = ours[0].tune(budget_seconds=1, max_candidates=2)
    assert r["measured"] >= 1, r


@pytest.mark.parametrize("dampening", [0.0, 0.3])
def test_momentum_turned_on_after_the_program_was_built_without_it(dampening):
    """SGD and RMSprop built with momentum=0 have no momentum buffer, and nothing in the
    program reads the momentum: a group's momentum set later (by hand, by CyclicLR's or
    OneCycleLR's momentum cycle) was silently not applied (SGD 0.87 off torch after two
    steps). Now the program is rebuilt with the buffer; SGD's starts from the gradient at the
    first step that finds none, as torch's does, dampening or not: also for a group turned on
    after another (its parameters held the program's zeros, not torch's None), and after a
    reload; a group turned off and on again goes on from its old buffer, as torch's."""
    def params():
        g = torch.Generator().manual_seed(11)
        return [torch.nn.Parameter(torch.randn(s, dtype=torch.float64, generator=g))
                for s in [(4, 3), (5,), ()]]

    def run(mod, plan, reload_at=None):
        ps = params()

        def make():
            return mod.SGD([{"params": ps[:1]}, {"params": ps[1:]}], lr=0.1,
                           dampening=dampening, weight_decay=0.01)

        o = make()
        sched = None
        if plan == "OneCycleLR":
            sched = torch.optim.lr_scheduler.OneCycleLR(o, max_lr=0.5, total_steps=20)
        for k in range(9):
            g = torch.Generator().manual_seed(200 + k)
            for p in ps:
                p.grad = torch.randn(p.shape, dtype=torch.float64, generator=g)
            for at, j, momentum in () if plan == "OneCycleLR" else plan:
                if at == k:
                    o.param_groups[j]["momentum"] = momentum
            o.step()
            if sched is not None:
                sched.step()
            if k == reload_at:
                sd = copy.deepcopy(o.state_dict())
                o = make()
                o.load_state_dict(sd)
        return ps

    plans = ["OneCycleLR",
             [(2, 1, 0.9), (4, 0, 0.5)],  # the second group, then the first
             [(1, 0, 0.9), (1, 1, 0.9), (3, 0, 0.0), (5, 0, 0.8)],  # on, off, on again
             [(1, 1, 0.9), (3, 0, 0.7), (5, 0, 0.0), (7, 0, 0.6)]]
    for plan in plans:
        for reload_at in (None, 2, 3):
            want, got = run(torch.optim, plan, reload_at), run(ot, plan, reload_at)
            for a, b in zip(want, got):
                assert torch.equal(a, b), (plan, reload_at, (a - b).abs().max().item())

    # 8-bit buffers (blocks of 256 with their absmax): a group turned on after another starts
    # from the gradient too, whose blocks' absmax the first buffer's are.
    gen = torch.Generator().manual_seed(1)
    ps = [torch.nn.Parameter(torch.randn(64, 128, generator=gen)) for _ in range(2)]
    o = ot.SGD([{"params": ps[:1]}, {"params": ps[1:]}], lr=0.1, dampening=dampening,
               state_format="8bit")
    for k in range(4):
        for p in ps:
            p.grad = torch.randn(p.shape, generator=gen)
        o.param_groups[1]["momentum"] = 0.9 if k >= 1 else 0.0
        o.param_groups[0]["momentum"] = 0.9 if k >= 3 else 0.0
        o.step()
    want = ps[0].grad.abs().reshape(-1, 256).amax(1)
    assert torch.equal(o.state[ps[0]]["momentum_buffer.absmax"], want)

    # RMSprop: torch's own step then finds no buffer (a KeyError); optjit says which.
    p = torch.nn.Parameter(torch.ones(3))
    o = ot.RMSprop([p], lr=0.01)
    p.grad = torch.ones(3)
    o.step()
    o.param_groups[0]["momentum"] = 0.9
    with pytest.raises(optjit.Error, match=r"has square_avg but not momentum_buffer: .* "
                                           r"RMSprop's momentum\) set after the state was made"):
        o.step()
    # ... and one turned on before its first step (CyclicLR at its creation) steps as torch's.
    want = [torch.nn.Parameter(torch.linspace(-1, 1, 7, dtype=torch.float64)) for _ in range(2)]
    opts = [cls([w], lr=0.01) for cls, w in zip((torch.optim.RMSprop, ot.RMSprop), want)]
    scheds = [torch.optim.lr_scheduler.CyclicLR(o, 0.001, 0.01, step_size_up=3) for o in opts]
    for k in range(5):
        for w, o, s in zip(want, opts, scheds):
            w.grad = torch.cos(w.detach() * (k + 1))
            o.step()
            s.step()
    assert opts[1].param_groups[0]["momentum"] > 0
    # (torch's vectorized float64 square root is not always correctly rounded: an ulp.)
    assert (want[0] - want[1]).abs().max().item() <= 1e-15
