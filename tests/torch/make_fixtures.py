#!/usr/bin/env python3
"""Writes tests/fixtures/torch_fixtures.json: what PyTorch (and lion-pytorch, torch-optimizer)
computes for each built-in, on small tensors over several steps, in float32 and float64.

The C++ tests compare the reference backend (and every other backend) against these numbers,
so CI needs no PyTorch. Regenerate with:
    pip install torch numpy torch-optimizer lion-pytorch
    python3 tests/torch/make_fixtures.py
Each case names the optjit pipeline text and builds the same thing in torch.
"""
import json
import math
import os
import sys

import torch
import torch_optimizer
import lion_pytorch

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
        for k, v in opt.state[p].items():
            if k in ("step", "weight_norm", "adam_norm", "trust_ratio"):
                continue
            st[k] = flat(v) if (torch.is_tensor(v) and v.dim() > 0) else enc(float(v))
        if "step" in opt.state[p]:
            st["step"] = enc(float(opt.state[p]["step"]))
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
    dict(name="sched_adamw_cosine", pipeline="chain(clip_grad_norm(max_norm=1.0), adamw(lr=cosine_annealing_lr(base_lr=0.01, T_max=5), weight_decay=0.05))",
         steps=8, clip_norm=(1.0, 2.0), torch=lambda g: O.AdamW(g, lr=0.01, weight_decay=0.05),
         sched=lambda o: S.CosineAnnealingLR(o, T_max=5)),
]


def main():
    out = {"torch": torch.__version__, "cases": []}
    for case in CASES:
        for dtype, dname in ((torch.float32, "f32"), (torch.float64, "f64")):
            r = run_case(case, dtype)
            entry = {"name": case["name"], "dtype": dname, "pipeline": case["pipeline"],
                     "groups": [dict(patterns=g["patterns"], overrides=g["overrides"]) for g in case.get("groups", [])]}
            entry.update(r)
            out["cases"].append(entry)
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(out, f, separators=(",", ":"))
    print(f"wrote {len(out['cases'])} cases to {os.path.normpath(OUT)}")


if __name__ == "__main__":
    sys.exit(main())
