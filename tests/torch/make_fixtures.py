#!/usr/bin/env python3
"""Writes tests/fixtures/torch_fixtures.json: what PyTorch (and lion-pytorch, torch-optimizer,
bitsandbytes) computes for each built-in, on small tensors over several steps, in float32 and
float64.

The C++ tests compare the reference backend (and every other backend) against these numbers,
so CI needs no PyTorch. Regenerate with:
    pip install torch numpy torch-optimizer lion-pytorch bitsandbytes
    python3 tests/torch/make_fixtures.py [--rewrite]
(--rewrite: recompute the cases already in the file too; without it they keep their numbers)
Each case names the optjit pipeline text and builds the same thing in torch.
"""
import json
import math
import os
import sys

import torch
import torch_optimizer
import lion_pytorch
from bitsandbytes.optim.ademamix import _ReferenceAdEMAMix

OUT = os.path.join(os.path.dirname(__file__), "..", "fixtures", "torch_fixtures.json")

SHAPES = {"w": [3, 4], "b": [5]}
EDGE_SHAPES = {"w": [3, 4], "b": [5], "scalar": [], "empty": [0]}


def enc(x):
    """A float for JSON: non-finite values as strings (JSON has no Inf/NaN)."""
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def flat(t):
    return [enc(v) for v in t.detach().reshape(-1).tolist()]


def make_tensors(shapes, dtype, gen, scale=1.0):
    return {n: (torch.randn(s, generator=gen, dtype=torch.float64) * scale).to(dtype) for n, s in shapes.items()}


def cosine_with_warmup_lambda(warmup, total, cycles=0.5):
    def f(step):
        if step < warmup:
            return float(step) / float(max(1, warmup))
        progress = float(step - warmup) / float(max(1, total - warmup))
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * float(cycles) * 2.0 * progress)))
    return f


def run_case(case, dtype):
    torch.set_default_dtype(torch.float64 if dtype == torch.float64 else torch.float32)
    gen = torch.Generator().manual_seed(case.get("seed", 0))
    shapes = case.get("shapes", SHAPES)
    steps = case.get("steps", 6)
    params = make_tensors(shapes, dtype, gen)
    gscale = case.get("grad_scale", 1.0)
    grads = [make_tensors(shapes, dtype, gen, gscale) for _ in range(steps)]
    if case.get("zero_grads"):
        grads = [{n: torch.zeros_like(g) for n, g in gs.items()} for gs in grads]
    for step, name, index, value in case.get("inject", []):
        grads[step][name].view(-1)[index] = value
    if case.get("constant_grad") is not None:
        grads = [{n: torch.full_like(g, case["constant_grad"]) for n, g in gs.items()} for gs in grads]

    tparams = {n: torch.nn.Parameter(p.clone()) for n, p in params.items()}
    groups_spec = case.get("groups", [])
    grouped = set()
    torch_groups = []
    for g in groups_spec:
        members = [tparams[n] for n in tparams if any(fnmatch(pat, n) for pat in g["patterns"]) and n not in grouped]
        grouped.update(n for n in tparams if any(fnmatch(pat, n) for pat in g["patterns"]))
        torch_groups.append({"params": members, **g["torch"]})
    default_group = {"params": [tparams[n] for n in tparams if n not in grouped]}
    all_groups = [default_group] + torch_groups
    opt = case["torch"](all_groups)
    sched = case["sched"](opt) if "sched" in case else None
    scaler_scale = case.get("scaler")

    history, skipped = [], []
    for t in range(steps):
        for n, p in tparams.items():
            p.grad = grads[t][n].clone()
        skip = False
        if scaler_scale is not None:
            inv = torch.tensor(scaler_scale, dtype=torch.float64).reciprocal().float().item()
            for p in tparams.values():
                p.grad.mul_(inv)
            skip = any((~torch.isfinite(p.grad)).any().item() for p in tparams.values())
        if "clip_norm" in case:
            max_norm, norm_type = case["clip_norm"]
            torch.nn.utils.clip_grad_norm_(list(tparams.values()), max_norm, norm_type, foreach=False)
        if "clip_value" in case:
            torch.nn.utils.clip_grad_value_(list(tparams.values()), case["clip_value"], foreach=False)
        if not skip:
            opt.step()
            if sched is not None:
                sched.step()
        skipped.append(skip)
        history.append({n: flat(p) for n, p in tparams.items()})

    state = {}
    for n, p in tparams.items():
        st = {}
        peer_state = case["state_map"](opt.state[p]) if "state_map" in case else opt.state[p]
        for k, v in peer_state.items():
            if k in ("step", "weight_norm", "adam_norm", "trust_ratio"):
                continue
            st[k] = flat(v) if (torch.is_tensor(v) and v.dim() > 0) else enc(float(v))
        if "step" in peer_state:
            st["step"] = enc(float(peer_state["step"]))
        state[n] = st
    return {
        "params": {n: {"shape": list(p.shape), "data": flat(p)} for n, p in params.items()},
        "grads": [{n: flat(g) for n, g in gs.items()} for gs in grads],
        "expected": history,
        "skipped": skipped,
        "state": state,
    }


def fnmatch(pat, name):
    import fnmatch as f
    return f.fnmatchcase(name, pat)


O = torch.optim
S = torch.optim.lr_scheduler


def ademamix_state(st):
    """bitsandbytes' AdEMAMix reference state under optjit's names (m1_m2 stacks the fast and
    slow averages)."""
    return {"exp_avg": st["m1_m2"][0], "exp_avg_slow": st["m1_m2"][1], "exp_avg_sq": st["nu"]}

CASES = [
    # SGD
    dict(name="sgd_plain", pipeline="sgd(lr=0.1)", torch=lambda g: O.SGD(g, lr=0.1)),
    dict(name="sgd_momentum", pipeline="sgd(lr=0.05, momentum=0.9)", torch=lambda g: O.SGD(g, lr=0.05, momentum=0.9)),
    dict(name="sgd_dampening", pipeline="sgd(lr=0.05, momentum=0.8, dampening=0.3)",
         torch=lambda g: O.SGD(g, lr=0.05, momentum=0.8, dampening=0.3)),
    dict(name="sgd_nesterov_wd", pipeline="sgd(lr=0.05, momentum=0.9, nesterov=true, weight_decay=0.01)",
         torch=lambda g: O.SGD(g, lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01)),
    dict(name="sgd_maximize", pipeline="sgd(lr=0.1, momentum=0.5, maximize=true)",
         torch=lambda g: O.SGD(g, lr=0.1, momentum=0.5, maximize=True)),
    # Adam / AdamW
    dict(name="adam_default", pipeline="adam()", torch=lambda g: O.Adam(g)),
    dict(name="adam_amsgrad_wd", pipeline="adam(lr=0.01, amsgrad=true, weight_decay=0.1)",
         torch=lambda g: O.Adam(g, lr=0.01, amsgrad=True, weight_decay=0.1)),
    dict(name="adam_betas_eps_max", pipeline="adam(lr=0.02, betas=(0.8, 0.99), eps=1e-6, maximize=true)",
         torch=lambda g: O.Adam(g, lr=0.02, betas=(0.8, 0.99), eps=1e-6, maximize=True)),
    dict(name="adam_decoupled", pipeline="adam(lr=0.01, weight_decay=0.1, decoupled_weight_decay=true)",
         torch=lambda g: O.Adam(g, lr=0.01, weight_decay=0.1, decoupled_weight_decay=True)),
    dict(name="adamw_default", pipeline="adamw()", torch=lambda g: O.AdamW(g)),
    dict(name="adamw_amsgrad", pipeline="adamw(lr=0.01, weight_decay=0.1, amsgrad=true)",
         torch=lambda g: O.AdamW(g, lr=0.01, weight_decay=0.1, amsgrad=True)),
    dict(name="adamw_maximize", pipeline="adamw(lr=0.01, maximize=true)", torch=lambda g: O.AdamW(g, lr=0.01, maximize=True)),
    dict(name="adamw_step1", pipeline="adamw(lr=0.1)", steps=1, torch=lambda g: O.AdamW(g, lr=0.1)),
    dict(name="adamw_zero_grads", pipeline="adamw(lr=0.01)", zero_grads=True, torch=lambda g: O.AdamW(g, lr=0.01)),
    dict(name="adamw_huge", pipeline="adamw(lr=0.01)", grad_scale=1e15, torch=lambda g: O.AdamW(g, lr=0.01)),
    dict(name="adamw_tiny", pipeline="adamw(lr=0.01)", grad_scale=1e-20, torch=lambda g: O.AdamW(g, lr=0.01)),
    dict(name="adamw_edge_shapes", pipeline="adamw(lr=0.01)", shapes=EDGE_SHAPES, torch=lambda g: O.AdamW(g, lr=0.01)),
    # Others from torch.optim
    dict(name="adamax_default", pipeline="adamax()", torch=lambda g: O.Adamax(g)),
    dict(name="adamax_wd_max", pipeline="adamax(lr=0.01, weight_decay=0.05, maximize=true)",
         torch=lambda g: O.Adamax(g, lr=0.01, weight_decay=0.05, maximize=True)),
    dict(name="nadam_default", pipeline="nadam()", steps=8, torch=lambda g: O.NAdam(g)),
    dict(name="nadam_wd", pipeline="nadam(lr=0.01, weight_decay=0.1, momentum_decay=0.01)",
         torch=lambda g: O.NAdam(g, lr=0.01, weight_decay=0.1, momentum_decay=0.01)),
    dict(name="nadam_decoupled", pipeline="nadam(lr=0.01, weight_decay=0.1, decoupled_weight_decay=true)",
         torch=lambda g: O.NAdam(g, lr=0.01, weight_decay=0.1, decoupled_weight_decay=True)),
    dict(name="radam_default", pipeline="radam()", steps=10, torch=lambda g: O.RAdam(g)),
    dict(name="radam_wd", pipeline="radam(lr=0.01, weight_decay=0.1)", steps=10,
         torch=lambda g: O.RAdam(g, lr=0.01, weight_decay=0.1)),
    dict(name="radam_decoupled", pipeline="radam(lr=0.01, weight_decay=0.1, decoupled_weight_decay=true)", steps=10,
         torch=lambda g: O.RAdam(g, lr=0.01, weight_decay=0.1, decoupled_weight_decay=True)),
    dict(name="rmsprop_default", pipeline="rmsprop()", torch=lambda g: O.RMSprop(g)),
    dict(name="rmsprop_centered", pipeline="rmsprop(lr=0.01, centered=true)", torch=lambda g: O.RMSprop(g, lr=0.01, centered=True)),
    dict(name="rmsprop_momentum", pipeline="rmsprop(lr=0.01, momentum=0.9)", torch=lambda g: O.RMSprop(g, lr=0.01, momentum=0.9)),
    dict(name="rmsprop_all", pipeline="rmsprop(lr=0.01, alpha=0.9, eps=1e-6, weight_decay=0.1, momentum=0.5, centered=true, maximize=true)",
         torch=lambda g: O.RMSprop(g, lr=0.01, alpha=0.9, eps=1e-6, weight_decay=0.1, momentum=0.5, centered=True, maximize=True)),
    dict(name="adagrad_default", pipeline="adagrad()", torch=lambda g: O.Adagrad(g)),
    dict(name="adagrad_all", pipeline="adagrad(lr=0.1, lr_decay=0.01, weight_decay=0.1, initial_accumulator_value=0.1, eps=1e-8, maximize=true)",
         torch=lambda g: O.Adagrad(g, lr=0.1, lr_decay=0.01, weight_decay=0.1, initial_accumulator_value=0.1, eps=1e-8, maximize=True)),
    dict(name="adadelta_default", pipeline="adadelta()", torch=lambda g: O.Adadelta(g)),
    dict(name="adadelta_all", pipeline="adadelta(lr=0.5, rho=0.95, eps=1e-5, weight_decay=0.01, maximize=true)",
         torch=lambda g: O.Adadelta(g, lr=0.5, rho=0.95, eps=1e-5, weight_decay=0.01, maximize=True)),
    dict(name="rprop_default", pipeline="rprop()", steps=8, torch=lambda g: O.Rprop(g)),
    dict(name="rprop_all", pipeline="rprop(lr=0.05, etas=(0.3, 1.5), step_sizes=(1e-4, 0.2), maximize=true)", steps=8,
         torch=lambda g: O.Rprop(g, lr=0.05, etas=(0.3, 1.5), step_sizes=(1e-4, 0.2), maximize=True)),
    dict(name="rprop_constant_grad", pipeline="rprop(lr=0.01)", steps=12, constant_grad=0.5,
         torch=lambda g: O.Rprop(g, lr=0.01)),
    dict(name="asgd_default", pipeline="asgd()", torch=lambda g: O.ASGD(g)),
    dict(name="asgd_averaging", pipeline="asgd(lr=0.05, lambd=0.01, alpha=0.5, t0=2, weight_decay=0.1)", steps=8,
         torch=lambda g: O.ASGD(g, lr=0.05, lambd=0.01, alpha=0.5, t0=2, weight_decay=0.1)),
    # lion-pytorch, torch-optimizer
    dict(name="lion_default", pipeline="lion()", torch=lambda g: lion_pytorch.Lion(g)),
    dict(name="lion_wd", pipeline="lion(lr=1e-3, betas=(0.95, 0.98), weight_decay=0.1)",
         torch=lambda g: lion_pytorch.Lion(g, lr=1e-3, betas=(0.95, 0.98), weight_decay=0.1)),
    # bitsandbytes' AdEMAMix reference (pure torch, any dtype; its optimizer kernels take f32
    # only on the CPU). It adds weight_decay * param to the update where bitsandbytes' kernels
    # (and optjit) decay the parameter first: the same value, rounded otherwise.
    dict(name="ademamix_default", pipeline="ademamix()", state_map=ademamix_state,
         torch=lambda g: _ReferenceAdEMAMix(g)),
    # (One parameter a group: the reference warms alpha and beta3 up in place of the group's
    # values inside its loop over parameters, so a group's second parameter would see them
    # warmed up twice; bitsandbytes' optimizer computes them per parameter from the group's.)
    dict(name="ademamix_warmup",
         pipeline="ademamix(lr=0.01, betas=(0.8, 0.99, 0.999), alpha=3, t_alpha=4, t_beta3=5, "
                  "eps=1e-6, weight_decay=0.1)", steps=8,
         groups=[dict(patterns=["b"], overrides={"alpha": 2.0}, torch={"alpha": 2.0})],
         state_map=ademamix_state,
         torch=lambda g: _ReferenceAdEMAMix(g, lr=0.01, betas=(0.8, 0.99, 0.999), alpha=3,
                                            t_alpha=4, t_beta3=5, eps=1e-6, weight_decay=0.1)),
    dict(name="lamb_default", pipeline="lamb()", torch=lambda g: torch_optimizer.Lamb(g)),
    dict(name="lamb_wd_debias", pipeline="lamb(lr=0.01, weight_decay=0.01, debias=true)",
         torch=lambda g: torch_optimizer.Lamb(g, lr=0.01, weight_decay=0.01, debias=True)),
    dict(name="lamb_clamp", pipeline="lamb(lr=0.01, clamp_value=0.5)", torch=lambda g: torch_optimizer.Lamb(g, lr=0.01, clamp_value=0.5)),
    dict(name="lamb_adam", pipeline="lamb(lr=0.01, adam=true)", torch=lambda g: torch_optimizer.Lamb(g, lr=0.01, adam=True)),
    # Clipping (over all tensors together)
    dict(name="clip_norm_adamw", pipeline="chain(clip_grad_norm(max_norm=1.0), adamw(lr=0.01, weight_decay=0.01))",
         clip_norm=(1.0, 2.0), torch=lambda g: O.AdamW(g, lr=0.01, weight_decay=0.01)),
    dict(name="clip_norm_inactive", pipeline="chain(clip_grad_norm(max_norm=100.0), sgd(lr=0.1))",
         clip_norm=(100.0, 2.0), torch=lambda g: O.SGD(g, lr=0.1)),
    dict(name="clip_norm_inf", pipeline="chain(clip_grad_norm(max_norm=0.5, norm_type=inf), sgd(lr=0.1, momentum=0.9))",
         clip_norm=(0.5, float("inf")), torch=lambda g: O.SGD(g, lr=0.1, momentum=0.9)),
    dict(name="clip_norm_l1", pipeline="chain(clip_grad_norm(max_norm=2.0, norm_type=1.0), sgd(lr=0.1))",
         clip_norm=(2.0, 1.0), torch=lambda g: O.SGD(g, lr=0.1)),
    dict(name="clip_value_sgd", pipeline="chain(clip_grad_value(clip_value=0.5), sgd(lr=0.1, momentum=0.9))",
         clip_value=0.5, torch=lambda g: O.SGD(g, lr=0.1, momentum=0.9)),
    # GradScaler: unscale; skip the step on Inf/NaN
    dict(name="scaler_skips", pipeline="chain(grad_scaler(scale=1024.0), adam(lr=0.01))", scaler=1024.0, steps=7,
         grad_scale=1024.0, inject=[(2, "w", 3, float("inf")), (4, "b", 0, float("nan"))],
         torch=lambda g: O.Adam(g, lr=0.01)),
    dict(name="scaler_clip_adamw", pipeline="chain(grad_scaler(scale=65536.0), clip_grad_norm(max_norm=1.0), adamw(lr=0.01))",
         scaler=65536.0, grad_scale=65536.0, clip_norm=(1.0, 2.0), inject=[(1, "w", 0, float("-inf"))],
         torch=lambda g: O.AdamW(g, lr=0.01)),
    # Parameter groups
    dict(name="groups_adamw", pipeline="adamw(lr=0.01, weight_decay=0.1)",
         groups=[dict(patterns=["b"], overrides={"weight_decay": 0.0, "lr": 0.02}, torch={"weight_decay": 0.0, "lr": 0.02})],
         torch=lambda g: O.AdamW(g, lr=0.01, weight_decay=0.1)),
    dict(name="groups_sgd_momentum", pipeline="sgd(lr=0.1, momentum=0.9)",
         groups=[dict(patterns=["w"], overrides={"momentum": 0.5, "lr": 0.05}, torch={"momentum": 0.5, "lr": 0.05})],
         torch=lambda g: O.SGD(g, lr=0.1, momentum=0.9)),
    # Schedules: the lr of step t is what the scheduler reports after t-1 step() calls
    dict(name="sched_step_lr", pipeline="sgd(lr=step_lr(base_lr=0.1, step_size=3, gamma=0.5))", steps=10,
         torch=lambda g: O.SGD(g, lr=0.1), sched=lambda o: S.StepLR(o, step_size=3, gamma=0.5)),
    dict(name="sched_multi_step_lr", pipeline="sgd(lr=multi_step_lr(base_lr=0.1, milestones=(2, 5, 5, 7), gamma=0.3))", steps=10,
         torch=lambda g: O.SGD(g, lr=0.1), sched=lambda o: S.MultiStepLR(o, milestones=[2, 5, 5, 7], gamma=0.3)),
    dict(name="sched_exponential_lr", pipeline="sgd(lr=exponential_lr(base_lr=0.1, gamma=0.8))", steps=10,
         torch=lambda g: O.SGD(g, lr=0.1), sched=lambda o: S.ExponentialLR(o, gamma=0.8)),
    dict(name="sched_cosine_annealing_lr", pipeline="sgd(lr=cosine_annealing_lr(base_lr=0.1, T_max=4, eta_min=0.01))", steps=14,
         torch=lambda g: O.SGD(g, lr=0.1), sched=lambda o: S.CosineAnnealingLR(o, T_max=4, eta_min=0.01)),
    dict(name="sched_linear_lr", pipeline="sgd(lr=linear_lr(base_lr=0.1, start_factor=0.25, end_factor=0.75, total_iters=4))", steps=8,
         torch=lambda g: O.SGD(g, lr=0.1), sched=lambda o: S.LinearLR(o, start_factor=0.25, end_factor=0.75, total_iters=4)),
    dict(name="sched_linear_lr_default", pipeline="sgd(lr=linear_lr(base_lr=0.1))", steps=8,
         torch=lambda g: O.SGD(g, lr=0.1), sched=lambda o: S.LinearLR(o)),
    dict(name="sched_one_cycle_cos", pipeline="sgd(lr=one_cycle_lr(max_lr=0.2, total_steps=12))", steps=12,
         torch=lambda g: O.SGD(g, lr=0.1), sched=lambda o: S.OneCycleLR(o, max_lr=0.2, total_steps=12, cycle_momentum=False)),
    dict(name="sched_one_cycle_linear_3phase",
         pipeline='sgd(lr=one_cycle_lr(max_lr=0.2, total_steps=12, pct_start=0.25, anneal_strategy="linear", three_phase=true, div_factor=10, final_div_factor=100))',
         steps=12, torch=lambda g: O.SGD(g, lr=0.1),
         sched=lambda o: S.OneCycleLR(o, max_lr=0.2, total_steps=12, pct_start=0.25, anneal_strategy="linear",
                                      three_phase=True, div_factor=10, final_div_factor=100, cycle_momentum=False)),
    dict(name="sched_polynomial_lr", pipeline="sgd(lr=polynomial_lr(base_lr=0.1, total_iters=6, power=2.0))", steps=9,
         torch=lambda g: O.SGD(g, lr=0.1), sched=lambda o: S.PolynomialLR(o, total_iters=6, power=2.0)),
    dict(name="sched_cosine_with_warmup", pipeline="sgd(lr=cosine_with_warmup(base_lr=0.1, num_warmup_steps=3, num_training_steps=10))", steps=12,
         torch=lambda g: O.SGD(g, lr=0.1), sched=lambda o: S.LambdaLR(o, cosine_with_warmup_lambda(3, 10))),
    # Periods of zero or less, where torch defines a value (where it raises: CHECKS below)
    dict(name="sched_step_lr_negative", pipeline="sgd(lr=step_lr(base_lr=0.1, step_size=-3, gamma=0.5))", steps=10,
         torch=lambda g: O.SGD(g, lr=0.1), sched=lambda o: S.StepLR(o, step_size=-3, gamma=0.5)),
    dict(name="sched_linear_lr_zero", pipeline="sgd(lr=linear_lr(base_lr=0.1, start_factor=0.25, end_factor=0.75, total_iters=0))", steps=6,
         torch=lambda g: O.SGD(g, lr=0.1), sched=lambda o: S.LinearLR(o, start_factor=0.25, end_factor=0.75, total_iters=0)),
    dict(name="sched_linear_lr_negative", pipeline="sgd(lr=linear_lr(base_lr=0.1, start_factor=0.25, end_factor=0.75, total_iters=-2))", steps=6,
         torch=lambda g: O.SGD(g, lr=0.1), sched=lambda o: S.LinearLR(o, start_factor=0.25, end_factor=0.75, total_iters=-2)),
    dict(name="sched_polynomial_lr_zero", pipeline="sgd(lr=polynomial_lr(base_lr=0.1, total_iters=0, power=2.0))", steps=6,
         torch=lambda g: O.SGD(g, lr=0.1), sched=lambda o: S.PolynomialLR(o, total_iters=0, power=2.0)),
    dict(name="sched_polynomial_lr_negative", pipeline="sgd(lr=polynomial_lr(base_lr=0.1, total_iters=-2, power=2.0))", steps=6,
         torch=lambda g: O.SGD(g, lr=0.1), sched=lambda o: S.PolynomialLR(o, total_iters=-2, power=2.0)),
    dict(name="sched_cosine_annealing_lr_negative", pipeline="sgd(lr=cosine_annealing_lr(base_lr=0.1, T_max=-4, eta_min=0.01))", steps=10,
         torch=lambda g: O.SGD(g, lr=0.1), sched=lambda o: S.CosineAnnealingLR(o, T_max=-4, eta_min=0.01)),
    dict(name="sched_one_cycle_one_step", pipeline="sgd(lr=one_cycle_lr(max_lr=0.2, total_steps=1))", steps=1,
         torch=lambda g: O.SGD(g, lr=0.1), sched=lambda o: S.OneCycleLR(o, max_lr=0.2, total_steps=1, cycle_momentum=False)),
    dict(name="sched_adamw_cosine", pipeline="chain(clip_grad_norm(max_norm=1.0), adamw(lr=cosine_annealing_lr(base_lr=0.01, T_max=5), weight_decay=0.05))",
         steps=8, clip_norm=(1.0, 2.0), torch=lambda g: O.AdamW(g, lr=0.01, weight_decay=0.05),
         sched=lambda o: S.CosineAnnealingLR(o, T_max=5)),
]


# Constructor checks: for each built-in, each hyperparameter and each probe value, whether
# the constructor (for a schedule: the constructor and its first steps) raises. optjit must
# reject exactly these, in the text form and in set_hyper, and NaN everywhere a bound exists.
PROBES = [-1.0, 0.0, 0.5, 1.0, 2.0, float("inf"), -float("inf")]
COUNT_PROBES = [-3, -1, 0, 1, 3]
PARAM = lambda: [torch.nn.Parameter(torch.zeros(2))]


def sched_ctor(cls, steps=3, **fixed):
    def make(**kw):
        o = O.SGD(PARAM(), lr=0.1)
        s = cls(o, **{**fixed, **kw})
        for _ in range(steps):
            o.step()
            s.step()
    return make


# (optjit name, torch constructor, {hyper: probes}, tuple hypers {name: default})
CHECKED = [
    ("sgd", lambda **kw: O.SGD(PARAM(), **kw), ["lr", "momentum", "dampening", "weight_decay"], {}),
    ("adam", lambda **kw: O.Adam(PARAM(), **kw), ["lr", "eps", "weight_decay"], {"betas": (0.9, 0.999)}),
    ("adamw", lambda **kw: O.AdamW(PARAM(), **kw), ["lr", "eps", "weight_decay"], {"betas": (0.9, 0.999)}),
    ("adamax", lambda **kw: O.Adamax(PARAM(), **kw), ["lr", "eps", "weight_decay"], {"betas": (0.9, 0.999)}),
    ("nadam", lambda **kw: O.NAdam(PARAM(), **kw), ["lr", "eps", "weight_decay", "momentum_decay"],
     {"betas": (0.9, 0.999)}),
    ("radam", lambda **kw: O.RAdam(PARAM(), **kw), ["lr", "eps", "weight_decay"], {"betas": (0.9, 0.999)}),
    ("rmsprop", lambda **kw: O.RMSprop(PARAM(), **kw), ["lr", "alpha", "eps", "weight_decay", "momentum"], {}),
    ("adagrad", lambda **kw: O.Adagrad(PARAM(), **kw),
     ["lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps"], {}),
    ("adadelta", lambda **kw: O.Adadelta(PARAM(), **kw), ["lr", "rho", "eps", "weight_decay"], {}),
    ("rprop", lambda **kw: O.Rprop(PARAM(), **kw), ["lr"], {"etas": (0.5, 1.2), "step_sizes": (1e-6, 50)}),
    ("asgd", lambda **kw: O.ASGD(PARAM(), **kw), ["lr", "lambd", "alpha", "t0", "weight_decay"], {}),
    ("lion", lambda **kw: lion_pytorch.Lion(PARAM(), **kw), ["lr", "weight_decay"], {"betas": (0.9, 0.99)}),
    ("lamb", lambda **kw: torch_optimizer.Lamb(PARAM(), **kw), ["lr", "eps", "weight_decay", "clamp_value"],
     {"betas": (0.9, 0.999)}),
]
SCHEDULES = [
    # (optjit name, torch constructor, the other required arguments, {hyper: probes})
    ("step_lr", sched_ctor(S.StepLR), {"base_lr": 0.1, "step_size": 2}, {"step_size": COUNT_PROBES, "gamma": PROBES}),
    ("cosine_annealing_lr", sched_ctor(S.CosineAnnealingLR), {"base_lr": 0.1, "T_max": 4},
     {"T_max": COUNT_PROBES, "eta_min": PROBES}),
    ("linear_lr", sched_ctor(S.LinearLR), {"base_lr": 0.1},
     {"start_factor": PROBES, "end_factor": PROBES, "total_iters": COUNT_PROBES}),
    ("polynomial_lr", sched_ctor(S.PolynomialLR), {"base_lr": 0.1}, {"total_iters": COUNT_PROBES, "power": PROBES}),
    ("one_cycle_lr", sched_ctor(S.OneCycleLR, steps=0, cycle_momentum=False), {"max_lr": 0.2, "total_steps": 10},
     {"total_steps": COUNT_PROBES[2:], "pct_start": PROBES}),
    ("exponential_lr", sched_ctor(S.ExponentialLR), {"base_lr": 0.1, "gamma": 0.5}, {"gamma": PROBES}),
]


def raises(make, **kw):
    try:
        make(**kw)
        return False
    except (ValueError, AssertionError, ZeroDivisionError):
        return True


# Part of the program only when nonzero at construction (a momentum buffer): probed on one.
STRUCTURAL = {("sgd", "momentum"), ("sgd", "dampening"), ("rmsprop", "momentum")}


def constructor_checks():
    out = []
    for name, make, scalars, tuples in CHECKED:
        for h in scalars:
            for v in PROBES:
                # sgd's momentum and dampening are part of the program only with momentum
                base = {"momentum": 0.9} if (name, h) in STRUCTURAL else {}
                kw = {**base, h: v}
                out.append({"transform": name, "hyper": h, "value": enc(v), "args": {k: enc(x) for k, x in kw.items()},
                            "base": base, "raises": raises(make, **kw)})
        for h, default in tuples.items():
            for k in range(2):
                for v in PROBES:
                    t = list(default)
                    t[k] = v
                    out.append({"transform": name, "hyper": h, "element": k, "value": enc(v),
                                "args": {h: [enc(x) for x in t]}, "base": {}, "raises": raises(make, **{h: tuple(t)})})
    # sgd's nesterov: momentum > 0 and dampening == 0
    for m, d in ((0.0, 0.0), (0.9, 0.0), (0.9, 0.1), (-1.0, 0.0)):
        out.append({"transform": "sgd", "hyper": "momentum", "value": m, "args": {"momentum": m, "dampening": d},
                    "options": {"nesterov": True}, "base": {"momentum": 0.9, "dampening": 0.0},
                    "raises": raises(lambda **kw: O.SGD(PARAM(), nesterov=True, **kw), momentum=m, dampening=d)})
    for name, make, required, hypers in SCHEDULES:
        for h, probes in hypers.items():
            for v in probes:
                kw = {**required, h: v}
                torch_kw = {k: x for k, x in kw.items() if k != "base_lr"}
                out.append({"schedule": name, "hyper": h, "value": enc(v), "args": {k: enc(x) for k, x in kw.items()},
                            "base": required, "raises": raises(make, **torch_kw)})
    return out


def main():
    out = {"torch": torch.__version__, "cases": [], "constructor_checks": constructor_checks()}
    for case in CASES:
        for dtype, dname in ((torch.float32, "f32"), (torch.float64, "f64")):
            r = run_case(case, dtype)
            entry = {"name": case["name"], "dtype": dname, "pipeline": case["pipeline"],
                     "groups": [dict(patterns=g["patterns"], overrides=g["overrides"]) for g in case.get("groups", [])]}
            entry.update(r)
            out["cases"].append(entry)
    # Cases already in the file keep their numbers: torch's float32 results differ in the last
    # bits between machines (vector widths, thread counts), and a fixture should change only
    # when its case does.
    if os.path.exists(OUT) and "--rewrite" not in sys.argv:
        with open(OUT) as f:
            old = {(c["name"], c["dtype"]): c for c in json.load(f)["cases"]}
        out["cases"] = [old.get((c["name"], c["dtype"]), c) if old.get((c["name"], c["dtype"]), {}).get("pipeline") == c["pipeline"] else c
                        for c in out["cases"]]
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(out, f, separators=(",", ":"))
    print(f"wrote {len(out['cases'])} cases to {os.path.normpath(OUT)}")


if __name__ == "__main__":
    sys.exit(main())
