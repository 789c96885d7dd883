"""clip_grad_norm_ deferred into the fused step (optjit.torch.clip_grad_norm_, and torch's after
an install()): torch's norm, and the gradients scaled by torch's coefficient inside the
optimizer's step instead of a pass of their own. Checked bit for bit against torch's
clip_grad_norm_ followed by the same optjit step (under a GradScaler, FSDP2 and torch.compile
too); the fallbacks (torch's scaling, at once, at the step or before another optimizer's) and
the errors where the gradients change after the clip. (optjit's step itself is checked against
torch's optimizers and float64 in test_torch.py.)"""
import copy
import pickle
from pathlib import Path

import pytest
import torch

import optjit.torch as ot

DEV = torch.device("cpu")


def model(seed=0, dtype=torch.float32, device=DEV):
    torch.manual_seed(seed)
    m = torch.nn.Sequential(torch.nn.Linear(48, 96), torch.nn.GELU(), torch.nn.Linear(96, 96),
                            torch.nn.GELU(), torch.nn.Linear(96, 10))
    return m.to(device=device, dtype=dtype)


def batches(n, seed=1, dtype=torch.float32, device=DEV):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(32, 48, generator=g).to(device=device, dtype=dtype),
             torch.randint(0, 10, (32,), generator=g).to(device)) for _ in range(n)]


def backward(m, x, y):
    # (x 20: gradients whose norm is far above the clip, so every step clips)
    torch.nn.functional.cross_entropy(m(x) * 20, y).backward()


def same(a, b):
    return all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def largest(a, b):
    return max((p - q).abs().max().item() for p, q in zip(a.parameters(), b.parameters()))


def run(make_opt, clip, steps=5, dtype=torch.float32, max_norm=0.5, device=DEV):
    """Steps of backward, clip, step; the model, the norms clip returned, the optimizer."""
    m = model(dtype=dtype, device=device)
    opt = make_opt(m.parameters())
    norms = []
    for x, y in batches(steps, dtype=dtype, device=device):
        opt.zero_grad()
        backward(m, x, y)
        norms.append(clip(m.parameters(), max_norm))
        opt.step()
    return m, norms, opt


@pytest.mark.parametrize("kind", ["adamw", "adamw_8bit", "sgd", "adamw_f64", "custom",
                                  "adamw_fused_clip_too", "adamw_bf16", "sgd_bf16", "adamw_f16"])
def test_the_deferred_clip_steps_as_torchs_clip_then_the_step(kind):
    """The same parameters bit for bit, and the same norms, as torch's clip_grad_norm_ before
    the same optjit step; and the clip was deferred (the pipeline scales in front, the
    gradients stay as backward left them). bf16 and f16 models too: torch rounds the scaled
    gradients to their dtype, and so does the step (like_grad)."""
    dtype = {"adamw_f64": torch.float64, "adamw_bf16": torch.bfloat16,
             "sgd_bf16": torch.bfloat16, "adamw_f16": torch.float16}.get(kind, torch.float32)
    signum = """transform signum(lr=1e-3, momentum=0.9) {
  state momentum_buffer = 0
  momentum_buffer = momentum * momentum_buffer + (1 - momentum) * grad
  param = param - lr * sign(momentum_buffer)
}
signum(lr=3e-3)"""
    make = {"adamw": lambda ps: ot.AdamW(ps, lr=1e-2),
            "adamw_8bit": lambda ps: ot.AdamW(ps, lr=1e-2, state_format="8bit"),
            "sgd": lambda ps: ot.SGD(ps, lr=0.1, momentum=0.9),
            "adamw_f64": lambda ps: ot.AdamW(ps, lr=1e-2),
            "custom": lambda ps: ot.Optimizer(ps, signum, {"lr": 3e-3}),
            # (a clip of its own in the step too: its norm is of the deferred clip's result)
            "adamw_fused_clip_too": lambda ps: ot.AdamW(ps, lr=1e-2, max_grad_norm=0.3),
            "adamw_bf16": lambda ps: ot.AdamW(ps, lr=1e-2),
            "sgd_bf16": lambda ps: ot.SGD(ps, lr=0.1, momentum=0.9),
            "adamw_f16": lambda ps: ot.AdamW(ps, lr=1e-3)}[kind]
    theirs, their_norms, _ = run(make, torch.nn.utils.clip_grad_norm_, dtype=dtype)
    ours, our_norms, opt = run(make, ot.clip_grad_norm_, dtype=dtype)
    assert same(theirs, ours), largest(theirs, ours)
    assert all(torch.equal(a, b) for a, b in zip(their_norms, our_norms))
    assert "optjit_deferred_clip" in opt.pipeline
    # The clip scaled nothing in place: the gradients are backward's.
    ours.zero_grad()
    with torch.no_grad():  # the first weights again: where torch's CPU kernels are AVX-512 (not
        # AVX2), the float16 model's logits reach 1e4 in its five steps, x 20 overflows, and
        # every gradient of this batch was NaN
        for p, q in zip(ours.parameters(), model(dtype=dtype).parameters()):
            p.copy_(q)
    backward(ours, *batches(1, seed=7, dtype=dtype)[0])
    before = [p.grad.clone() for p in ours.parameters()]
    assert all(torch.isfinite(g).all() for g in before)
    ot.clip_grad_norm_(ours.parameters(), 0.5)
    assert all(torch.equal(g, p.grad) for g, p in zip(before, ours.parameters()))


def test_torchs_clip_is_optjits_after_install_and_back_after_uninstall():
    original = torch.nn.utils.clip_grad_norm_
    with ot.install():
        assert torch.nn.utils.clip_grad_norm_ is ot.clip_grad_norm_
        assert torch.nn.utils.clip_grad.clip_grad_norm_ is ot.clip_grad_norm_
        m, _, opt = run(lambda ps: torch.optim.AdamW(ps, lr=1e-2),
                        lambda ps, c: torch.nn.utils.clip_grad_norm_(ps, c))
        assert isinstance(opt, ot.AdamW) and "optjit_deferred_clip" in opt.pipeline
    assert torch.nn.utils.clip_grad_norm_ is original
    assert torch.nn.utils.clip_grad.clip_grad_norm_ is original
    with ot.install(defer_clip=False):
        assert torch.nn.utils.clip_grad_norm_ is original
    ref, _, _ = run(lambda ps: ot.AdamW(ps, lr=1e-2), torch.nn.utils.clip_grad_norm_)
    assert same(ref, m)


def test_gradients_no_single_optjit_optimizer_steps_are_clipped_at_once_as_torch_does():
    """Parameters of two optimizers, a parameter listed twice, complex gradients: torch's
    clip, at once (the gradients are scaled when it returns)."""
    m = model()
    half = list(m.parameters())
    a, b = ot.AdamW(half[:3], lr=1e-2), ot.AdamW(half[3:], lr=1e-2)
    backward(m, *batches(1)[0])
    ref = [_with_grad(p.grad.clone()) for p in m.parameters()]
    expected = torch.nn.utils.clip_grad_norm_(ref, 0.5)
    norm = ot.clip_grad_norm_(m.parameters(), 0.5)
    assert torch.equal(norm, expected)
    assert all(torch.equal(p.grad, r.grad) for p, r in zip(m.parameters(), ref))  # scaled now
    assert a._clip is None and b._clip is None
    del a, b

    # A parameter listed twice: torch counts its gradient twice and scales it twice.
    m = model()
    opt = ot.AdamW(m.parameters(), lr=1e-2)
    backward(m, *batches(1)[0])
    ps = list(m.parameters())
    ref = [_with_grad(p.grad.clone()) for p in ps]
    expected = torch.nn.utils.clip_grad_norm_([ref[0]] + ref, 0.5)
    assert torch.equal(ot.clip_grad_norm_([ps[0]] + ps, 0.5), expected)
    assert all(torch.equal(p.grad, r.grad) for p, r in zip(ps, ref)) and opt._clip is None

    # Complex gradients (optjit steps their real views; torch scales them as complex).
    z = torch.nn.Parameter(torch.randn(64, 64, dtype=torch.complex64))
    opt = ot.AdamW([z], lr=1e-2)
    z.grad = torch.randn(64, 64, dtype=torch.complex64) * 10
    ref = [_with_grad(z.grad.clone())]
    expected = torch.nn.utils.clip_grad_norm_(ref, 0.5)
    assert torch.equal(ot.clip_grad_norm_([z], 0.5), expected)
    assert torch.equal(z.grad, ref[0].grad) and opt._clip is None


def _with_grad(g):
    p = torch.nn.Parameter(torch.zeros_like(g))
    p.grad = g
    return p


def test_a_step_over_other_parameters_than_the_clipped_scales_with_torch_first():
    """Clipping a part of the model and stepping all of it: the clipped part is scaled with
    torch at the step (the coefficient is not the other parameters'), the rest not at all."""
    def partial(clip):
        def f(ps, c):
            return clip(list(ps)[:2], c)
        return f
    theirs, _, _ = run(lambda ps: ot.AdamW(ps, lr=1e-2), partial(torch.nn.utils.clip_grad_norm_))
    ours, _, opt = run(lambda ps: ot.AdamW(ps, lr=1e-2), partial(ot.clip_grad_norm_))
    assert same(theirs, ours), largest(theirs, ours)


def test_a_second_clip_sees_the_first_clips_gradients():
    """clip to 0.5, then the norm again (max_norm=inf, as a trainer that logs it): torch's
    second norm is of the clipped gradients, and so is this one."""
    def twice(clip):
        def f(ps, c):
            ps = list(ps)
            clip(ps, c)
            return clip(ps, float("inf"))
        return f
    theirs, their_norms, _ = run(lambda ps: ot.AdamW(ps, lr=1e-2),
                                 twice(torch.nn.utils.clip_grad_norm_))
    ours, our_norms, _ = run(lambda ps: ot.AdamW(ps, lr=1e-2), twice(ot.clip_grad_norm_))
    assert all(torch.equal(a, b) for a, b in zip(their_norms, our_norms))
    assert float(our_norms[0]) == pytest.approx(0.5, rel=1e-5)
    assert same(theirs, ours)


def test_another_optimizer_stepping_clipped_parameters_sees_them_clipped():
    """torch's own optimizer stepping parameters whose clip was deferred to an optjit one
    (torch's global step pre-hook): their gradients are scaled first, as torch's clip left
    them; then the optjit step scales nothing twice."""
    def pair(clip):
        m = model()
        opt = ot.AdamW(m.parameters(), lr=1e-2)
        other = torch.optim.SGD(m.parameters(), lr=0.05)
        for x, y in batches(3):
            opt.zero_grad()
            backward(m, x, y)
            clip(m.parameters(), 0.5)
            other.step()
            opt.step()
        return m
    theirs, ours = pair(torch.nn.utils.clip_grad_norm_), pair(ot.clip_grad_norm_)
    assert same(theirs, ours), largest(theirs, ours)


def test_gradients_changed_after_the_clip_are_an_error_and_zero_grad_drops_the_clip():
    m = model()
    opt = ot.AdamW(m.parameters(), lr=1e-2)
    x, y = batches(1)[0]
    backward(m, x, y)
    ot.clip_grad_norm_(m.parameters(), 0.5)
    backward(m, x, y)  # accumulated into the clipped gradients, in place
    with pytest.raises(ot.Error, match=r"the gradient of parameter 0 was changed in place after "
                                       r"clip_grad_norm_, which optjit defers into the "
                                       r"optimizer's step"):
        opt.step()

    m2 = model()
    opt2 = ot.AdamW(m2.parameters(), lr=1e-2)
    backward(m2, x, y)
    ot.clip_grad_norm_(m2.parameters(), 0.5)
    next(m2.parameters()).grad = next(m2.parameters()).grad * 2  # one replaced, others kept
    with pytest.raises(ot.Error, match="parameter 0 was replaced while other clipped gradients "
                                       "were kept"):
        opt2.step()

    # A clip dropped with its gradients (zero_grad, in place or to None; a new backward) is
    # torch's clip of gradients no step read: the step is the unclipped one.
    for drop in ("zero_grad_in_place", "set_to_none_by_the_model"):
        a, b = model(), model()
        oa, ob = ot.AdamW(a.parameters(), lr=1e-2), ot.AdamW(b.parameters(), lr=1e-2)
        backward(b, x, y)
        ot.clip_grad_norm_(b.parameters(), 0.5)
        if drop == "zero_grad_in_place":
            ob.zero_grad(set_to_none=False)
        else:
            b.zero_grad()
        backward(a, x, y), backward(b, x, y)
        oa.step(), ob.step()
        assert same(a, b), drop


@pytest.mark.parametrize("unscale", [True, False])
def test_a_grad_scaler_step_after_the_deferred_clip_is_torchs_flow(unscale):
    """AMP's order (as accelerate's clip_grad_norm_ does it): scale the loss, backward,
    unscale_, clip, scaler.step: the same parameters as with torch's clip. A step the scaler
    skips (Inf) drops the clip; the next one steps as torch's flow. Without unscale_ (the clip
    sees the scaled gradients), the step unscales inside, after the clip's scaling, as
    torch's clip and the same step do."""
    def amp(clip):
        m = model()
        opt = ot.AdamW(m.parameters(), lr=1e-2)
        # (not a power of two: unscaling before or after the clip's scaling rounds apart)
        scaler = torch.amp.GradScaler("cpu", init_scale=1000.0)
        norms = []
        for k, (x, y) in enumerate(batches(5)):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(m(x) * 20, y)
            if k == 2:
                loss = loss * float("inf")
            scaler.scale(loss).backward()
            if unscale:
                scaler.unscale_(opt)
            norms.append(clip(m.parameters(), 0.5 if unscale else 512.0))
            scaler.step(opt)
            scaler.update()
        return m, norms, opt
    theirs, their_norms, _ = amp(torch.nn.utils.clip_grad_norm_)
    ours, our_norms, opt = amp(ot.clip_grad_norm_)
    assert "optjit_deferred_clip" in opt.pipeline
    # (unscaled by torch's unscale_, the scaler hands the step no scale)
    assert ("grad_scaler" in opt.pipeline) == (not unscale)
    if not unscale:
        assert opt.pipeline.index("chain(optjit_deferred_clip") < opt.pipeline.index(
            "chain(grad_scaler")
    assert same(theirs, ours), largest(theirs, ours)
    assert all(torch.equal(a, b) or (a.isnan() and b.isnan())
               for a, b in zip(their_norms, our_norms))


def test_custom_pipeline_text_steps_under_a_grad_scaler():
    """A pipeline with its own transform declarations under a GradScaler: the unscaling goes in
    front of its expression, after the declarations (it was put before them: a parse error at
    the first step)."""
    text = """# Signum, declared here
transform signum(lr=1e-3, momentum=0.9) {
  state momentum_buffer = 0   # an unmatched { in a comment
  momentum_buffer = momentum * momentum_buffer + (1 - momentum) * grad
  param = param - lr * sign(momentum_buffer)
}
signum(lr=3e-3)"""
    def amp(scaled):
        m = model()
        opt = ot.Optimizer(m.parameters(), text, {"lr": 3e-3})
        scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, enabled=scaled)
        for x, y in batches(3):
            opt.zero_grad()
            scaler.scale(torch.nn.functional.cross_entropy(m(x) * 20, y)).backward()
            scaler.step(opt)
            scaler.update()
        return m, opt
    plain, _ = amp(False)
    scaled, opt = amp(True)
    assert opt.pipeline.startswith("# Signum") and "chain(grad_scaler(" in opt.pipeline
    # (1024 and its inverse are powers of two: the unscaled gradients are the same bits)
    assert same(plain, scaled), largest(plain, scaled)


@pytest.mark.parametrize("name", sorted(
    p.name for p in (Path(__file__).resolve().parents[2] / "examples" / "pipelines").glob("*.opt")))
def test_what_goes_in_front_of_an_example_pipeline_goes_after_its_declarations(name):
    """Every example pipeline (declarations, comments, hyperparameter bounds) with a GradScaler
    and the deferred clip in front: the text still plans, with their passes' bytes, and its
    transforms are the example's behind the two."""
    import optjit
    text = (Path(__file__).resolve().parents[2] / "examples" / "pipelines" / name).read_text()
    front = ot._in_front(ot._in_front(text, "grad_scaler(scale=65536.0)"), ot._DEFERRED_CALL,
                         ot._DEFERRED_DECLARATION)
    plain, wrapped = optjit.plan(text), optjit.plan(front)
    assert 'hyper "optjit_deferred_clip.optjit_clip_coef"' in wrapped
    assert 'hyper "grad_scaler.scale"' in wrapped
    for line in plain.splitlines():  # (each of the example's hyperparameters is kept)
        if line.startswith("hyper "):
            assert line in wrapped, line


def test_an_optimizer_with_the_deferred_clip_copies_and_pickles():
    """A copy keeps the program with the deferred clip in front (no recompile to a new
    program, no clip of the original's gradients) and continues bit for bit."""
    m, _, opt = run(lambda ps: ot.AdamW(ps, lr=1e-2, state_format="8bit"), ot.clip_grad_norm_)
    assert pickle.loads(pickle.dumps(opt)).pipeline == opt.pipeline
    m2, opt2 = copy.deepcopy((m, opt))
    assert opt2.pipeline == opt.pipeline and opt2._clip is None
    for mm, o in ((m, opt), (m2, opt2)):
        for x, y in batches(2, seed=9):
            o.zero_grad()
            backward(mm, x, y)
            ot.clip_grad_norm_(mm.parameters(), 0.5)
            o.step()
    assert same(m, m2)


def test_fsdp2_gradients_defer_their_clip_as_each_process_scales_its_shards(tmp_path):
    """FSDP2 (fully_shard, 2 processes, gloo; fsdp2_clip_worker.py): torch's norm of the
    DTensor gradients is replicated, and each process's step scales its local shards by it: the
    same norms and the same shards, bit for bit, as torch's clip then the step, with f32 and
    8-bit state; and the clip was deferred (it was torch's, at once, for DTensors)."""
    import json

    import distributed_run

    distributed_run.run("fsdp2_clip_worker.py", tmp_path / "result.json")
    for rank in range(2):
        res = json.loads((tmp_path / f"result.json.rank{rank}").read_text())
        assert set(res) == {"None", "8bit"}
        for fmt, got in res.items():
            assert got["deferred"] and got["same_norms"] and got["clipped"], (rank, fmt, got)
            assert got["same_shards"] == [True] * 4, (rank, fmt, got)


def test_a_compiled_training_step_defers_its_clip_with_the_eager_results():
    """torch.compile over clip then step (the step is opaque to dynamo): the clip is still
    deferred, and the parameters and norms are the eager ones, bit for bit."""
    results = []
    for compiled in (False, True):
        m = model()
        opt = ot.AdamW(m.parameters(), lr=1e-2)

        def step():
            norm = ot.clip_grad_norm_(m.parameters(), 0.5)
            opt.step()
            return norm
        f = torch.compile(step) if compiled else step
        norms = []
        for x, y in batches(3):
            opt.zero_grad()
            backward(m, x, y)
            norms.append(f())
        assert "optjit_deferred_clip" in opt.pipeline, compiled
        results.append((m, norms))
    (a, na), (b, nb) = results
    assert same(a, b) and all(torch.equal(p, q) for p, q in zip(na, nb))
