"""8-bit blockwise optimizer state (state_format="8bit", "q8", "q8u") against bitsandbytes
itself, on the CPU: its dynamic maps, its quantizer's codes and scales bit for bit, and its
8-bit optimizers (Adam8bit, AdamW8bit, Lion8bit, RMSprop8bit, SGD8bit) step for step."""
import copy

import pytest
import torch

import bitsandbytes as bnb  # the oracle: ./dev.sh test installs it
import bitsandbytes.functional as F

import optjit
import optjit.torch as ot

# Two quantized tensors (one with a partial last block), one exactly at bitsandbytes'
# min_8bit_size (quantized) and two below it (f32 state, as bitsandbytes keeps them).
SHAPES = [(64, 300), (10000,), (4096,), (300,), (4095,)]


def run(make, steps, seed=0, scale=0.1):
    g = torch.Generator().manual_seed(seed)
    ps = [torch.nn.Parameter(torch.randn(s, generator=g)) for s in SHAPES]
    opt = make(ps)
    for k in range(steps):
        gg = torch.Generator().manual_seed(1000 + k)
        for p in ps:
            p.grad = torch.randn(p.shape, generator=gg) * scale
        opt.step()
    return ps, opt


def test_dynamic_maps_are_bitsandbytes_own():
    for name, signed in (("q8", True), ("q8u", False)):
        ours = torch.tensor(optjit._optjit.quant_map(name))
        assert torch.equal(ours, F.create_dynamic_map(signed=signed)), name


KEEP = """transform keep(lr=0.0) {
  state s = 0
  state u = 0
  s = grad
  u = grad * grad
  param = param - lr * s
}
keep(state_format="s:q8,u:q8u")"""


def test_codes_and_scales_are_bitsandbytes_quantize_blockwise_bit_for_bit():
    """A transform that stores the gradient (and its square) as q8 (q8u) state: the codes and
    absmax the cpu backend writes are bitsandbytes.functional.quantize_blockwise's, over
    magnitudes from 1e-12 to 1e4, exact zeros, and a partial last block."""
    g = torch.Generator().manual_seed(3)
    n = 256 * 40 + 77
    x = torch.randn(n, generator=g) ** 3 * torch.logspace(-12, 4, n)
    x[256:512] = 0  # a block of zeros: absmax 0, codes 0
    w = torch.nn.Parameter(torch.zeros(n))
    opt = ot.Optimizer([w], KEEP, backend="cpu")
    w.grad = x.clone()
    opt.step()
    st = opt.state[w]
    assert st["s"].dtype == torch.uint8 and st["s.absmax"].shape == (41,)
    for name, values, signed in (("s", x, True), ("u", x * x, False)):
        codes, absmax = torch.ops.bitsandbytes.quantize_blockwise(
            values, F.create_dynamic_map(signed=signed), 256)
        assert torch.equal(st[name], codes), (name, int((st[name] != codes).sum()))
        assert torch.equal(st[name + ".absmax"], absmax), name
        assert torch.equal(st[name + ".absmax"][1], torch.tensor(0.0))


# bitsandbytes optimizer, optjit class, keywords for both, states (ours, theirs, their absmax).
CASES = {
    "Lion": (bnb.optim.Lion8bit, dict(lr=1e-3, weight_decay=0.1),
             [("exp_avg", "state1", "absmax1")]),
    "SGD": (bnb.optim.SGD8bit, dict(lr=1e-2, momentum=0.9),
            [("momentum_buffer", "state1", "absmax1")]),
    "RMSprop": (bnb.optim.RMSprop8bit, dict(lr=1e-3), [("square_avg", "state1", "absmax1")]),
    "Adam": (bnb.optim.Adam8bit, dict(lr=1e-2),
             [("exp_avg", "state1", "absmax1"), ("exp_avg_sq", "state2", "absmax2")]),
    "AdamW": (bnb.optim.AdamW8bit, dict(lr=1e-2, weight_decay=0.1),
              [("exp_avg", "state1", "absmax1"), ("exp_avg_sq", "state2", "absmax2")]),
}


def same_as_bitsandbytes(name, theirs, tb, ours, to):
    """optjit's parameters and states (`ours`, optimizer `to`) against bitsandbytes' (`theirs`,
    `tb`) within the bounds test_8bit_optimizers_step_as_bitsandbytes_does explains."""
    _, kw, states = CASES[name]
    exact_codes = name in ("Lion", "SGD", "RMSprop")
    for p_t, p_o in zip(theirs, ours):
        quantized = p_o.numel() >= 4096
        for mine, their, absmax in states:
            s_o, s_t = to.state[p_o][mine], tb.state[p_t][their]
            if not quantized:
                assert s_o.dtype == s_t.dtype == torch.float32
                continue
            assert s_o.dtype == s_t.dtype == torch.uint8
            same = (s_o == s_t).double().mean().item()
            if exact_codes:
                assert same == 1.0, (mine, p_o.shape, same)
            else:
                assert same >= 0.9995, (mine, p_o.shape, same)
            a_o, a_t = to.state[p_o][mine + ".absmax"], tb.state[p_t][absmax]
            if name == "SGD":
                assert torch.equal(a_o, a_t), mine
            else:
                assert ((a_o - a_t).abs() <= 1e-6 * a_t.abs()).all(), mine
        diff = (p_o.double() - p_t.double()).abs()
        # An ulp at the parameter's own scale, or at 1 (the scale of these randn parameters)
        # where it is smaller: a fused p + (-lr) * m rounds once, ours twice.
        ulp = torch.finfo(torch.float32).eps * p_t.double().abs().clamp_min(1.0)
        if name == "Lion":
            assert torch.equal(p_o, p_t)
        elif exact_codes:
            assert (diff <= 2 * ulp).all(), (p_o.shape, diff.max().item())
        else:
            far = diff > 4 * ulp
            assert far.double().mean().item() <= 0.0005, (p_o.shape, int(far.sum()))
            # Less than half a step: a code a table cell off moves that element's m or v by the
            # cell's width, and its trajectory from there (measured: 0.26 lr).
            assert diff.max().item() <= kw["lr"] / 2, (p_o.shape, diff.max().item())


@pytest.mark.parametrize("name", list(CASES))
def test_8bit_optimizers_step_as_bitsandbytes_does(name):
    """30 steps of bitsandbytes' 8-bit optimizer and of optjit.torch.<name>(state_format="8bit")
    from the same parameters and gradients. bitsandbytes' CPU optimizer is written in torch
    ops, whose sqrt is not correctly rounded (an ulp off for one input in five); optjit.torch
    computes torch.optim's formulas, fused where torch's CPU kernels fuse (add_ with alpha,
    addcmul_, lerp_), and Adam's first moment by torch.optim's lerp_ where bitsandbytes
    multiplies and adds (optjit.bitsandbytes' drop-ins follow bitsandbytes' formulas: bit for
    bit with a correctly rounded sqrt, test_dropins.py). So:
    - SGD8bit (m * momentum + g: nothing to fuse): codes and scales bit for bit, parameters
      within 2 f32 ulps.
    - Lion8bit, RMSprop8bit: codes bit for bit, scales to 1e-6 (the fused multiply-add moves
      the block's largest value by an ulp); parameters bit for bit (Lion: sign of the update)
      or within 2 ulps.
    - Adam8bit, AdamW8bit: codes equal but for at most 0.05% (a last-bit difference in m, from
      lerp_ against mul_ and add_, or in v, from the sqrt, moving it across a table cell;
      measured 0.005-0.01% of first-moment codes); scales to 1e-6;
      parameters within 4 ulps but for the elements such a code touched, which stay within
      half a step (lr / 2).
    Small tensors keep f32 state in both. Against optjit's f64 reference with the same
    quantizer the two are equally accurate: the mean error is dominated by the few codes that
    f64 puts in the neighbouring table cell, the same for both; in the bulk, a fused
    multiply-add rounds once where optjit rounds twice (SGD: 5.8e-9 against 4.8e-9; Adam:
    7.2e-9 against 9.2e-9), hence the 25% margin."""
    make, kw, states = CASES[name]
    theirs, tb = run(lambda ps: make(ps, **kw), 30)
    ours, to = run(lambda ps: getattr(ot, name)(ps, state_format="8bit", backend="cpu", **kw), 30)
    ref, _ = run(lambda ps: getattr(ot, name)(ps, state_format="8bit", backend="reference", **kw),
                 30)
    same_as_bitsandbytes(name, theirs, tb, ours, to)
    err_o = torch.cat([(a.double() - r.double()).abs().flatten() for a, r in zip(ours, ref)])
    err_t = torch.cat([(a.double() - r.double()).abs().flatten() for a, r in zip(theirs, ref)])
    assert err_o.mean().item() <= 1.25 * err_t.mean().item() + 1e-9


@pytest.mark.parametrize("name", list(CASES))
def test_a_bitsandbytes_checkpoint_continues_in_optjit_as_in_bitsandbytes(name):
    """bitsandbytes' state dict (its codes and absmax packed under
    '__bnb_optimizer_quant_state__' as state1/absmax1/qmap1...) loads into
    optjit.torch.<name>(state_format="8bit"): the same maps and blocks, so its codes are
    optjit's state as they are, and 10 more steps on each stay within the bounds of the
    step-for-step test. optjit started such a checkpoint's state from zeros (keeping its step
    count) and trained on."""
    make, kw, states = CASES[name]
    theirs, tb = run(lambda ps: make(ps, **kw), 3)
    saved = copy.deepcopy(tb.state_dict())  # as torch.save and torch.load would
    assert "__bnb_optimizer_quant_state__" in saved["state"][0]
    ours = [torch.nn.Parameter(p.detach().clone()) for p in theirs]
    to = getattr(ot, name)(ours, state_format="8bit", backend="cpu", **kw)
    to.load_state_dict(saved)
    _step_on(theirs, tb, ours, to, range(3, 13))
    same_as_bitsandbytes(name, theirs, tb, ours, to)
    assert float(to.state[ours[0]]["step"]) == 13


def _step_on(a, oa, b, ob, steps):
    """Both optimizers through the same further steps (run()'s gradients for those steps)."""
    for k in steps:
        gg = torch.Generator().manual_seed(1000 + k)
        for p, q in zip(a, b):
            p.grad = torch.randn(p.shape, generator=gg) * 0.1
            q.grad = p.grad.clone()
        oa.step()
        ob.step()


def _adopted(opt, params, names):
    """The states `names` of each of `params` that `opt` adopts at its next step (taken right
    after binding, before stepping)."""
    seen = [{} for _ in params]
    real = ot._Engine.bind

    def bind(eng, o):
        real(eng, o)
        for s, p in zip(seen, params):
            s.update({n: o.state[p][n].clone() for n in names})

    ot._Engine.bind = bind
    try:
        opt.step()
    finally:
        ot._Engine.bind = real
    return seen


def test_checkpoints_in_another_format_convert_and_another_optimizers_are_errors():
    """A bitsandbytes checkpoint loaded into a state kept unquantized, or quantized with
    another map: its codes' values (map value times block scale, as the kernels read them),
    which that format then takes. A class bitsandbytes has no counterpart of, and a torch SGD
    checkpoint loaded into AdamW: errors naming them (optjit started such state afresh)."""
    theirs, tb = run(lambda ps: bnb.optim.AdamW8bit(ps, lr=1e-2), 2)
    st = tb.state[theirs[0]]
    values = {"exp_avg": _dequantized(st["qmap1"], st["state1"], st["absmax1"]),
              "exp_avg_sq": _dequantized(st["qmap2"], st["state2"], st["absmax2"])}
    for fmt in (None, "exp_avg:q8,exp_avg_sq:q8"):
        ps = [torch.nn.Parameter(p.detach().clone()) for p in theirs]
        o = ot.AdamW(ps, lr=1e-2, **({"state_format": fmt} if fmt else {}))
        o.load_state_dict(copy.deepcopy(tb.state_dict()))
        for p in ps:
            p.grad = torch.ones_like(p)
        got = _adopted(o, [ps[0]], ["exp_avg", "exp_avg_sq"])[0]
        if fmt is None:
            for name in values:
                assert torch.equal(got[name].flatten(), values[name]), name
        else:  # exp_avg's codes as they were; exp_avg_sq's values in the signed map
            assert torch.equal(got["exp_avg"], st["state1"])
            codes, _ = optjit._optjit.quantize("q8", values["exp_avg_sq"].contiguous())
            assert torch.equal(got["exp_avg_sq"].flatten(),
                               torch.frombuffer(bytearray(codes), dtype=torch.uint8))
    with pytest.raises(optjit.Error, match=r"a bitsandbytes checkpoint loads into optjit.torch's "
                                           r"SGD, Adam, AdamW, RMSprop, Adagrad, Lion, AdEMAMix, "
                                           r"not Adadelta"):
        ot.Adadelta([torch.nn.Parameter(p.detach().clone()) for p in theirs]).load_state_dict(
            copy.deepcopy(tb.state_dict()))
    ps = [torch.nn.Parameter(torch.randn(5)) for _ in range(2)]
    t = torch.optim.SGD(ps, lr=0.1, momentum=0.9)
    for p in ps:
        p.grad = torch.ones_like(p)
    t.step()
    sd = t.state_dict()
    for st in sd["state"].values():
        st["step"] = torch.tensor(1.0)
    o = ot.AdamW(ps)
    o.load_state_dict(sd)
    with pytest.raises(optjit.Error, match=r"optimizer.state of parameter 0 has momentum_buffer "
                                           r"but none of exp_avg, exp_avg_sq: a checkpoint of "
                                           r"another optimizer"):
        o.step()


def test_8bit_state_dict_round_trip_continues_identically():
    """optimizer.state[p] holds the codes (uint8, the parameter's shape) and the scales
    (float32, one per block) under exp_avg / exp_avg.absmax; a state_dict taken mid-training
    loads into a fresh optimizer, which continues bit for bit."""
    kw = dict(lr=1e-2, weight_decay=0.1, state_format="8bit", max_grad_norm=1.0)
    ps, opt = run(lambda ps: ot.AdamW(ps, **kw), 5)
    st = opt.state[ps[0]]
    assert st["exp_avg"].dtype == torch.uint8 and st["exp_avg"].shape == ps[0].shape
    assert st["exp_avg.absmax"].dtype == torch.float32 and st["exp_avg.absmax"].shape == (75,)
    assert opt.state[ps[3]]["exp_avg"].dtype == torch.float32  # (300,): too small
    saved = copy.deepcopy(opt.state_dict())  # as torch.save and torch.load would
    copies = [torch.nn.Parameter(p.detach().clone()) for p in ps]
    opt2 = ot.AdamW(copies, **kw)
    opt2.load_state_dict(saved)
    _step_on(ps, opt, copies, opt2, range(5, 10))
    for p, c in zip(ps, copies):
        assert torch.equal(p, c)
    for mine in ("exp_avg", "exp_avg_sq", "exp_avg.absmax"):
        assert torch.equal(opt.state[ps[0]][mine], opt2.state[copies[0]][mine])


def test_8bit_state_takes_a_quarter_of_the_memory_and_loads_torchs_checkpoints():
    """8 -> 2.03 bytes of AdamW state per parameter. A checkpoint of torch.optim.AdamW (f32
    moments) loads into 8-bit state, quantized as the cpu backend stores state (bitsandbytes'
    quantize_blockwise of torch's moments, bit for bit); the next step equals torch's AdamW
    from the dequantized moments."""
    w = torch.nn.Parameter(torch.randn(256 * 64))
    opt = ot.AdamW([w], state_format="8bit")
    w.grad = torch.randn_like(w)
    opt.step()
    nbytes = sum(t.numel() * t.element_size() for k, t in opt.state[w].items() if k != "step")
    assert nbytes == 2 * (w.numel() + 4 * 64)
    ref_w = torch.nn.Parameter(w.detach().clone())
    ref = torch.optim.AdamW([ref_w], lr=1e-2)
    for _ in range(3):
        ref_w.grad = torch.randn_like(w)
        ref.step()
    mine = torch.nn.Parameter(ref_w.detach().clone())
    fresh = ot.AdamW([mine], lr=1e-2, state_format="8bit")
    saved = copy.deepcopy(ref.state_dict())
    fresh.load_state_dict(saved)
    # What the load stores: bitsandbytes' quantization of torch's moments, bit for bit.
    deq = {}
    for name, signed in (("exp_avg", True), ("exp_avg_sq", False)):
        m = saved["state"][0][name]
        codes, scales = optjit._optjit.quantize("q8" if signed else "q8u", m.float().contiguous())
        codes = torch.frombuffer(bytearray(codes), dtype=torch.uint8)
        scales = torch.frombuffer(bytearray(scales), dtype=torch.float32)
        want, want_absmax = torch.ops.bitsandbytes.quantize_blockwise(
            m, F.create_dynamic_map(signed=signed), 256)
        assert torch.equal(codes, want) and torch.equal(scales, want_absmax), name
        deq[name] = _dequantized(F.create_dynamic_map(signed=signed), codes, scales)
    # torch's AdamW from those dequantized moments, and ours from the loaded checkpoint: one
    # step lands on the same parameters (to f32 rounding).
    ref2_w = torch.nn.Parameter(ref_w.detach().clone())
    ref2 = torch.optim.AdamW([ref2_w], lr=1e-2)
    sd2 = copy.deepcopy(saved)
    sd2["state"][0]["exp_avg"] = deq["exp_avg"].view(w.shape)
    sd2["state"][0]["exp_avg_sq"] = deq["exp_avg_sq"].view(w.shape)
    ref2.load_state_dict(sd2)
    g = torch.randn_like(w)
    mine.grad, ref2_w.grad = g.clone(), g.clone()
    fresh.step()
    ref2.step()
    assert torch.allclose(mine, ref2_w, rtol=1e-6, atol=1e-6), (mine - ref2_w).abs().max().item()
    st = fresh.state[mine]
    assert st["exp_avg"].dtype == torch.uint8 and st["exp_avg.absmax"].shape == (64,)


def test_8bit_state_on_opencl_steps_as_the_cpu_and_checkpoints_are_current():
    """The OpenCL backend (PoCL here) over CPU tensors: the same parameters and codes as the
    cpu backend, bit for bit. Its state lives on the device between steps, so state_dict()
    fetches it first (it once returned the values bound before the first step)."""
    kw = dict(lr=1e-2, weight_decay=0.1, state_format="8bit", max_grad_norm=1.0)
    a, oa = run(lambda ps: ot.AdamW(ps, backend="cpu", **kw), 5)
    b, ob = run(lambda ps: ot.AdamW(ps, backend="opencl", **kw), 5)
    for x, y in zip(a, b):
        assert torch.equal(x, y)
    sa, sb = oa.state_dict()["state"], ob.state_dict()["state"]
    for k in sa:
        for name in ("exp_avg", "exp_avg_sq", "exp_avg.absmax"):
            assert torch.equal(sa[k][name], sb[k][name]), (k, name)


def _unpacked(codes):
    """4-bit codes two to a byte (torchao's packing: the even element in the high nibble)."""
    c = codes.flatten()
    return torch.stack([c >> 4, c & 15], dim=-1).flatten()


def _dequantized(qmap, codes, scale, block=256):
    return (qmap[codes.flatten().long()].view(-1, block) * scale.view(-1, 1)).flatten()


def _twenty_steps_then_one_from_torchaos_state(tao_cls, state_format,
                                                shapes=((64, 256), (8192,))):
    """20 steps of torchao's optimizer and optjit.torch.AdamW(state_format=...) from the same
    parameters and gradients (they stay less than one step, lr, apart), then one more step of
    each from torchao's state, loaded into a fresh optjit optimizer as its codes and scales.
    Returns torchao's parameters and optimizer and the fresh optjit ones."""
    kw = dict(lr=1e-2, weight_decay=0.1)
    # torchao quantizes multiples of its block only
    g = torch.Generator().manual_seed(0)
    start = [torch.randn(s, generator=g) for s in shapes]
    grads = [[torch.randn(s, generator=g) * 0.1 for s in shapes] for _ in range(21)]
    pt = [torch.nn.Parameter(t.clone()) for t in start]
    po = [torch.nn.Parameter(t.clone()) for t in start]
    ot_ = tao_cls(pt, **kw)
    oo = ot.AdamW(po, state_format=state_format, **kw)
    for k in range(20):
        for p, q, gr in zip(pt, po, grads[k]):
            p.grad, q.grad = gr.clone(), gr.clone()
        ot_.step()
        oo.step()
    for p, q in zip(pt, po):
        assert (p - q).abs().max().item() <= kw["lr"]  # less than one step apart
    # torchao's own state dict (its states are tensor subclasses holding codes and scales):
    # they load as optjit's codes and scales, as they are.
    q2 = [torch.nn.Parameter(p.detach().clone()) for p in pt]
    o2 = ot.AdamW(q2, state_format=state_format, **kw)
    o2.load_state_dict(ot_.state_dict())
    names = ("exp_avg", "exp_avg_sq")
    loaded = [{n: ot_.state[p][n].codes.view(torch.uint8).clone() for n in names} for p in pt]
    for p, q, gr in zip(pt, q2, grads[20]):
        p.grad, q.grad = gr.clone(), gr.clone()
    ot_.step()
    for want, got in zip(loaded, _adopted(o2, q2, names)):  # the codes as loaded
        for n in names:
            assert torch.equal(got[n], want[n]), n
    return pt, ot_, q2, o2


def test_8bit_state_is_within_one_quantization_step_of_torchaos_adamw8bit():
    """torchao's AdamW8bit quantizes with the same maps and blocks but rounds to the nearest
    code exactly (bitsandbytes' CPU table, which optjit follows, can pick a code a few entries
    away below |x| / absmax ~ 1e-4) and updates both moments with lerp. From the same state
    (torchao's codes and scales loaded into optjit) one step of each gives states within one
    quantization step of each other, element by element, and the same parameters to f32
    rounding. Over 20 steps from scratch the parameters stay less than one step (lr) apart."""
    import torchao.optim as tao  # ./dev.sh test installs it
    pt, ot_, q2, o2 = _twenty_steps_then_one_from_torchaos_state(tao.AdamW8bit, "8bit")
    for p, q in zip(pt, q2):
        assert torch.allclose(p, q, rtol=1e-5, atol=1e-6), (p - q).abs().max().item()
        for name, qname in (("exp_avg", "q8"), ("exp_avg_sq", "q8u")):
            st = ot_.state[p][name]
            qmap = st.qmap.float()
            assert torch.equal(qmap, torch.tensor(optjit._optjit.quant_map(qname)))
            theirs = _dequantized(qmap, st.codes, st.scale)
            ours = _dequantized(qmap, o2.state[q][name], o2.state[q][name + ".absmax"])
            c = st.codes.flatten().long()
            scale = torch.maximum(st.scale, o2.state[q][name + ".absmax"]).repeat_interleave(256)
            step = torch.maximum(qmap[(c + 1).clamp(max=255)] - qmap[c],
                                 qmap[c] - qmap[(c - 1).clamp(min=0)])
            # One code step, or the table's cell (2 / 65535) where the map is denser than it.
            bound = torch.maximum(step, torch.tensor(2 / 65535)) * scale * 1.0001
            assert ((ours - theirs).abs() <= bound).all(), (name, int(((ours - theirs).abs() > bound).sum()))


def test_f8_codes_are_torchaos_quantize_fp8_bit_for_bit():
    """state_format="f8" (also named "fp8", as "s" here) quantizes as torchao's OptimStateFp8:
    per block of 256, scale = max(absmax, 1e-12) / 448 and codes = (x / scale).to(
    float8_e4m3fn), bit for bit, on the cpu backend, over magnitudes from 1e-12 to 1e4 and a
    block of zeros."""
    from torchao.optim.subclass_fp8 import quantize_fp8
    g = torch.Generator().manual_seed(5)
    n = 256 * 40
    x = torch.randn(n, generator=g) ** 3 * torch.logspace(-12, 4, n)
    x[256:512] = 0
    w = torch.nn.Parameter(torch.zeros(n))
    opt = ot.Optimizer([w], KEEP.replace('"s:q8,u:q8u"', '"s:fp8,u:f8"'), backend="cpu")
    w.grad = x.clone()
    opt.step()
    st = opt.state[w]
    for name, values in (("s", x), ("u", x * x)):
        codes, scale = quantize_fp8(values, 256)
        assert torch.equal(st[name], codes.view(torch.uint8)), (name, int((st[name] != codes.view(torch.uint8)).sum()))
        assert torch.equal(st[name + ".absmax"], scale), name


def test_f8_state_is_within_one_quantization_step_of_torchaos_adamwfp8():
    """torchao's AdamWFp8 and optjit.torch.AdamW(state_format="f8"): from the same state (its
    codes and scales loaded into optjit), one step of each gives states within one e4m3 step of
    each other, element by element (torchao updates both moments with lerp, torch's AdamW the
    second with mul and addcmul), and the same parameters to f32 rounding; 20 steps from
    scratch stay less than lr apart."""
    import torchao.optim as tao
    pt, ot_, q2, o2 = _twenty_steps_then_one_from_torchaos_state(tao.AdamWFp8, "f8")
    fmap = torch.tensor(optjit._optjit.quant_map("f8"))
    for p, q in zip(pt, q2):
        assert torch.allclose(p, q, rtol=1e-5, atol=1e-6), (p - q).abs().max().item()
        for name in ("exp_avg", "exp_avg_sq"):
            st = ot_.state[p][name]
            c = st.codes.view(torch.uint8).flatten().long()
            theirs = _dequantized(fmap, st.codes.view(torch.uint8), st.scale)
            ours = _dequantized(fmap, o2.state[q][name], o2.state[q][name + ".absmax"])
            scale = torch.maximum(st.scale, o2.state[q][name + ".absmax"]).repeat_interleave(256)
            mag = c & 127
            step = torch.maximum(fmap[(mag + 1).clamp(max=126)] - fmap[mag],
                                 fmap[mag] - fmap[(mag - 1).clamp(min=0)])  # e4m3 steps
            bound = step * scale * 1.0001
            assert ((ours - theirs).abs() <= bound).all(), (name, int(((ours - theirs).abs() > bound).sum()))


def test_8bit_state_with_parameters_of_several_dtypes():
    """bf16, f32 and f16 parameters in one optimizer with 8-bit state (one program per dtype,
    one step, the clip over all): codes for the large ones, f32 state for the small one, and
    the cpu backend close to the f64 reference with the same quantizer: within 4 ulps of each
    dtype but for at most 1% of elements (a code f64 puts in the neighbouring table cell), and
    none more than its 3 steps of lr apart."""
    def make(backend):
        g = torch.Generator().manual_seed(2)
        ps = [torch.nn.Parameter(torch.randn(64, 128, generator=g).to(torch.bfloat16)),
              torch.nn.Parameter(torch.randn(8192, generator=g)),
              torch.nn.Parameter(torch.randn(100, generator=g).to(torch.float16))]
        opt = ot.AdamW(ps, lr=1e-2, state_format="8bit", max_grad_norm=1.0, backend=backend)
        for k in range(3):
            gg = torch.Generator().manual_seed(50 + k)
            for p in ps:
                p.grad = torch.randn(p.shape, generator=gg).to(p.dtype)
            opt.step()
        return ps, opt
    ps, opt = make("cpu")
    ref, _ = make("reference")
    assert [opt.state[p]["exp_avg"].dtype for p in ps] == [torch.uint8, torch.uint8, torch.float32]
    for p, r in zip(ps, ref):
        ulp = torch.finfo(p.dtype).eps * r.detach().double().abs().clamp_min(1.0)
        diff = (p.double() - r.double()).abs()
        assert (diff > 4 * ulp).double().mean().item() <= 0.01, p.dtype
        assert diff.max().item() <= 3 * 1e-2, p.dtype


def test_a_nan_gradient_makes_its_block_nan_not_a_hidden_code():
    """A NaN gradient in 8-bit state: bitsandbytes drops NaN from the block's absmax and hides
    it in some code; optjit makes the block's scale NaN, so all 256 values of that block read
    back NaN (as f32 state would show the one) and the next steps keep showing it. Other
    blocks are untouched. Under a GradScaler the step is skipped and nothing changes."""
    w = torch.nn.Parameter(torch.randn(4096))
    opt = ot.AdamW([w], lr=1e-2, state_format="8bit")
    w.grad = torch.randn(4096)
    opt.step()
    before = w.detach().clone()
    g = torch.randn(4096)
    g[300] = float("nan")
    w.grad = g
    opt.step()
    st = opt.state[w]
    assert torch.isnan(st["exp_avg.absmax"][1]) and torch.isfinite(st["exp_avg.absmax"][0])
    assert torch.isnan(w[300]) and torch.isfinite(w[:256]).all() and torch.isfinite(w[512:]).all()
    # GradScaler: the found-inf skip happens inside the fused step; state and params stay.
    v = torch.nn.Parameter(before.clone())
    opt2 = ot.AdamW([v], lr=1e-2, state_format="8bit")
    scaler = torch.amp.GradScaler("cpu", init_scale=4.0)

    def scaled_step(x):
        opt2.zero_grad(set_to_none=True)
        scaler.scale((v * x).sum()).backward()
        scaler.step(opt2)
        scaler.update()

    scaled_step(torch.randn(4096))
    saved = {k: t.clone() for k, t in opt2.state[v].items()}
    p_saved = v.detach().clone()
    scaled_step(g)
    assert torch.equal(v.detach(), p_saved)
    for k, t in opt2.state[v].items():
        assert torch.equal(t, saved[k]), k


KEEP4 = KEEP.replace('"s:q8,u:q8u"', '"s:q4,u:q4u"')


def test_4bit_maps_are_torchaos_own():
    from torchao.optim.subclass_4bit import get_qmap_signed, get_qmap_unsigned
    assert optjit._optjit.quant_map("q4") == list(torch.tensor(get_qmap_signed()).tolist())
    assert optjit._optjit.quant_map("q4u") == list(torch.tensor(get_qmap_unsigned()).tolist())


@pytest.mark.parametrize("block", [128, 256])
@pytest.mark.parametrize("backend", ["cpu", "reference", "opencl"])
def test_4bit_codes_are_torchaos_quantize_4bit_bit_for_bit(backend, block):
    """state_format="q4" / "q4u" quantize as torchao's OptimState4bit: per block of 128,
    scale = max(absmax, 1e-12), codes = quantize_4bit_with_qmap(x / scale) packed two to a
    byte, bit for bit, over magnitudes from 1e-12 to 1e4, a block of zeros and values exactly
    on the map's midpoints (where torchao's residual rule rounds up); "q4_b256" / "q4u_b256"
    the same per block of 256 (torchao's AdamW4bit(block_size=256))."""
    from torchao.optim.quant_utils import quantize_4bit_with_qmap, scale_tensor
    from torchao.optim.subclass_4bit import get_qmap_signed, get_qmap_unsigned
    g = torch.Generator().manual_seed(5)
    n = 128 * 80
    x = torch.randn(n, generator=g) ** 3 * torch.logspace(-12, 4, n)
    x[256:384] = 0
    for k, qm in enumerate((get_qmap_signed(), get_qmap_unsigned())):
        q = torch.tensor(qm)
        mids = (q[:-1] + q[1:]) / 2  # a block whose absmax is 1: y = x exactly
        x[1024 + 128 * k:1024 + 128 * k + 15] = mids
        x[1024 + 128 * k + 15] = 1.0
    w = torch.nn.Parameter(torch.zeros(n))
    pipeline = KEEP4 if block == 128 else KEEP4.replace('"s:q4,u:q4u"', '"s:q4_b256,u:q4u_b256"')
    opt = ot.Optimizer([w], pipeline, backend=backend)
    w.grad = x.clone()
    opt.step()
    st = opt.state_dict()["state"][0]
    assert st["s"].dtype == torch.uint8 and st["s"].shape == (n // 2,)
    assert st["s.absmax"].shape == (n // block,)
    for name, values, qm in (("s", x, get_qmap_signed()), ("u", x * x, get_qmap_unsigned())):
        if backend == "reference" and name == "u":
            values = (x.double() * x.double())  # the reference squares in float64
        scaled, scale = scale_tensor(values, block)
        codes = quantize_4bit_with_qmap(scaled, torch.tensor(qm, dtype=scaled.dtype))
        packed = (codes[::2] << 4) | codes[1::2]
        assert torch.equal(st[name], packed), (name, int((st[name] != packed).sum()))
        assert torch.equal(st[name + ".absmax"], scale.float()), name


def test_4bit_quantizes_only_what_torchao_quantizes():
    """torchao's rule: at least 4096 elements and a multiple of the block (128); other tensors
    keep f32 state. 4bit is q4 for exp_avg and q4u for exp_avg_sq: 8 -> 1.03 bytes of state per
    parameter."""
    shapes = [(4096,), (32, 130), (4000,), (64, 128)]
    ps = [torch.nn.Parameter(torch.randn(s)) for s in shapes]
    opt = ot.AdamW(ps, state_format="4bit")
    for p in ps:
        p.grad = torch.randn_like(p)
    opt.step()
    kinds = [opt.state[p]["exp_avg"].dtype for p in ps]
    assert kinds == [torch.uint8, torch.float32, torch.float32, torch.uint8]
    w = ps[3]
    nbytes = sum(t.numel() * t.element_size() for k, t in opt.state[w].items() if k != "step")
    assert nbytes == 2 * (w.numel() // 2 + 4 * w.numel() // 128)


def test_4bit_state_dict_round_trip_continues_identically():
    kw = dict(lr=1e-2, weight_decay=0.1, state_format="4bit", max_grad_norm=1.0)
    shapes = [(64, 256), (4096,), (300,)]

    def make(ps):
        return ot.AdamW(ps, **kw)

    g = torch.Generator().manual_seed(0)
    ps = [torch.nn.Parameter(torch.randn(s, generator=g)) for s in shapes]
    opt = make(ps)

    def steps(params, o, ks):
        for k in ks:
            gg = torch.Generator().manual_seed(1000 + k)
            for p in params:
                p.grad = torch.randn(p.shape, generator=gg) * 0.1
            o.step()

    steps(ps, opt, range(5))
    saved = copy.deepcopy(opt.state_dict())
    copies = [torch.nn.Parameter(p.detach().clone()) for p in ps]
    opt2 = make(copies)
    opt2.load_state_dict(saved)
    steps(ps, opt, range(5, 10))
    steps(copies, opt2, range(5, 10))
    for p, c in zip(ps, copies):
        assert torch.equal(p, c)
    for mine in ("exp_avg", "exp_avg_sq", "exp_avg.absmax", "exp_avg_sq.absmax"):
        assert torch.equal(opt.state[ps[0]][mine], opt2.state[copies[0]][mine])


def test_4bit_state_is_within_one_quantization_step_of_torchaos_adamw4bit():
    """torchao's AdamW4bit and optjit.torch.AdamW(state_format="4bit"): the same maps, blocks,
    quantizer and packing; torchao updates both moments with lerp, torch's AdamW the second
    with mul and addcmul. From the same state (torchao's codes and scales loaded into optjit),
    one step of each gives states within one 4-bit code step of each other, element by element,
    and the same parameters to f32 rounding; 20 steps from scratch stay less than lr apart."""
    import torchao.optim as tao
    pt, ot_, q2, o2 = _twenty_steps_then_one_from_torchaos_state(
        tao.AdamW4bit, "4bit", shapes=((64, 128), (4096,)))
    differ = 0
    for p, q in zip(pt, q2):
        assert torch.allclose(p, q, rtol=1e-5, atol=1e-6), (p - q).abs().max().item()
        for name, qname in (("exp_avg", "q4"), ("exp_avg_sq", "q4u")):
            st = ot_.state[p][name]
            qmap = st.qmap.float()
            assert torch.equal(qmap, torch.tensor(optjit._optjit.quant_map(qname)))
            c = _unpacked(st.codes).long()
            theirs = _dequantized(qmap, c, st.scale, 128)
            mine = _unpacked(o2.state[q][name]).long()
            ours = _dequantized(qmap, mine, o2.state[q][name + ".absmax"], 128)
            differ += int((mine != c).sum())
            scale = torch.maximum(st.scale, o2.state[q][name + ".absmax"]).repeat_interleave(128)
            step = torch.maximum(qmap[(c + 1).clamp(max=15)] - qmap[c],
                                 qmap[c] - qmap[(c - 1).clamp(min=0)])
            bound = step * scale * 1.0001
            assert ((ours - theirs).abs() <= bound).all(), (name, int(((ours - theirs).abs() > bound).sum()))
    # Nearly all the same codes (measured: all; the scales of exp_avg_sq differ by an ulp).
    assert differ < 0.01 * sum(2 * p.numel() for p in pt)


@pytest.mark.parametrize("state_format,formats", [("4bit", ("q4", "q4u")), ("f8", ("f8", "f8"))])
def test_torchs_checkpoint_loads_into_4bit_and_fp8_state(state_format, formats):
    """torch AdamW's moments load into 4-bit and fp8 state, quantized on load as the cpu
    backend stores them (4-bit failed: its values were made in the codes' flat shape)."""
    w = torch.nn.Parameter(torch.randn(64, 256, generator=torch.Generator().manual_seed(2)))
    ref = torch.optim.AdamW([w], lr=1e-2)
    for _ in range(2):
        w.grad = torch.randn_like(w)
        ref.step()
    mine = torch.nn.Parameter(w.detach().clone())
    o = ot.AdamW([mine], lr=1e-2, state_format=state_format)
    o.load_state_dict(copy.deepcopy(ref.state_dict()))
    mine.grad = torch.ones_like(mine)
    got = _adopted(o, [mine], ["exp_avg", "exp_avg.absmax", "exp_avg_sq", "exp_avg_sq.absmax"])[0]
    for name, fmt in zip(("exp_avg", "exp_avg_sq"), formats):
        codes, scales = optjit._optjit.quantize(fmt, ref.state[w][name].contiguous())
        assert torch.equal(got[name].flatten(), torch.frombuffer(bytearray(codes),
                                                                 dtype=torch.uint8)), name
        assert torch.equal(got[name + ".absmax"],
                           torch.frombuffer(bytearray(scales), dtype=torch.float32)), name


def test_torchaos_checkpoint_loads_into_unquantized_state_as_its_values():
    """torchao's AdamW8bit state dict (live tensor subclasses) into optjit's f32 AdamW: each
    state is its values (code value times block scale), copied at load: torchao stepping on
    afterwards changes neither them nor the step count."""
    import torchao.optim as tao
    w = torch.nn.Parameter(torch.randn(64, 256, generator=torch.Generator().manual_seed(4)))
    t = tao.AdamW8bit([w], lr=1e-2)
    for _ in range(2):
        w.grad = torch.randn_like(w)
        t.step()
    want = {n: t.state[w][n].dequantize().clone() for n in ("exp_avg", "exp_avg_sq")}
    mine = torch.nn.Parameter(w.detach().clone())
    o = ot.AdamW([mine], lr=1e-2)
    o.load_state_dict(t.state_dict())
    t.step()  # torchao steps on: what was loaded must not follow
    mine.grad = torch.ones_like(mine)
    got = _adopted(o, [mine], ["exp_avg", "exp_avg_sq"])[0]
    for n in want:
        assert got[n].dtype == torch.float32 and torch.equal(got[n], want[n]), n
    assert float(o.state[mine]["step"]) == 3


@pytest.mark.parametrize("saved,loaded", [("8bit", None), ("8bit", "4bit"), ("4bit", "8bit"),
                                          ("f8", "bf16")])
def test_a_quantized_checkpoint_loads_into_another_state_format_as_its_values(saved, loaded):
    """optjit's state dict names each quantized state's format ("exp_avg.format"), so it loads
    into another state_format: each state as its values (code value times block scale), which
    the new format then takes; and the run continues as torch's AdamW from those values."""
    w = torch.nn.Parameter(torch.randn(64, 256, generator=torch.Generator().manual_seed(6)))
    o = ot.AdamW([w], lr=1e-2, state_format=saved)
    for _ in range(3):
        w.grad = torch.randn_like(w)
        o.step()
    sd = copy.deepcopy(o.state_dict())
    st = o.state[w]
    values = {n: _values(sd["state"][0][n + ".format"], st[n], st[n + ".absmax"], w)
              for n in ("exp_avg", "exp_avg_sq")}
    mine = torch.nn.Parameter(w.detach().clone())
    o2 = ot.AdamW([mine], lr=1e-2, **({"state_format": loaded} if loaded else {}))
    o2.load_state_dict(sd)
    g = torch.randn_like(w)
    mine.grad = g.clone()
    got = _adopted(o2, [mine], ["exp_avg", "exp_avg_sq"])[0]
    for n, v in values.items():
        if loaded is None:
            assert got[n].dtype == torch.float32 and torch.equal(got[n], v), n
        elif loaded == "bf16":
            assert torch.equal(got[n], v.to(torch.bfloat16)), n
        else:
            fmt = o2.state_dict()["state"][0][n + ".format"]
            codes, _ = optjit._optjit.quantize(fmt, v.contiguous())
            assert torch.equal(got[n].flatten(), torch.frombuffer(bytearray(codes),
                                                                  dtype=torch.uint8)), n
    if loaded is None:  # one step from those values: torch's AdamW's
        ref_w = torch.nn.Parameter(w.detach().clone())
        ref = torch.optim.AdamW([ref_w], lr=1e-2)
        ref_sd = copy.deepcopy(ref.state_dict())
        ref_sd["state"] = {0: {"step": torch.tensor(3.0), **values}}
        ref.load_state_dict(ref_sd)
        ref_w.grad = g.clone()
        ref.step()
        assert torch.allclose(mine, ref_w, rtol=1e-6, atol=1e-7), (mine - ref_w).abs().max()


def _values(fmt, codes, scales, like):
    """Quantized state's values, computed here from the format's map (4-bit unpacked)."""
    if fmt == "f8":
        v = codes.flatten().view(torch.float8_e4m3fn).float() * scales.repeat_interleave(256)
    else:
        qmap = torch.tensor(optjit._optjit.quant_map(fmt))
        four = fmt in ("q4", "q4u")
        v = _dequantized(qmap, _unpacked(codes) if four else codes, scales, 128 if four else 256)
    return v.view(like.shape)


def test_8bit_codes_of_a_row_major_weight_load_into_a_channels_last_one_as_their_values():
    """A checkpoint's codes hold their blocks in their own memory order: the 8-bit state of a
    row-major conv weight, loaded into f32 state of the same weight in channels_last, is each
    element's value by its index (not by its place in memory)."""
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(32, 64, 3)  # 18,432 weights: quantized
    o = ot.AdamW(conv.parameters(), lr=1e-2, state_format="8bit")
    x = torch.randn(2, 32, 8, 8)
    for _ in range(2):
        o.zero_grad()
        conv(x).square().mean().backward()
        o.step()
    sd = copy.deepcopy(o.state_dict())
    st = o.state[conv.weight]
    want = {n: _values(sd["state"][0][n + ".format"], st[n], st[n + ".absmax"], conv.weight)
            for n in ("exp_avg", "exp_avg_sq")}
    conv2 = torch.nn.Conv2d(32, 64, 3).to(memory_format=torch.channels_last)
    with torch.no_grad():
        conv2.weight.copy_(conv.weight)
        conv2.bias.copy_(conv.bias)
    o2 = ot.AdamW(conv2.parameters(), lr=1e-2)
    o2.load_state_dict(sd)
    o2.zero_grad()
    conv2(x).square().mean().backward()
    got = _adopted(o2, [conv2.weight], list(want))[0]
    for n, v in want.items():
        assert got[n].is_contiguous(memory_format=torch.channels_last), n
        assert torch.equal(got[n], v), n


def test_a_param_groups_quantize_state_chooses_as_bitsandbytes_overrides_do():
    """A param group's "quantize_state": False keeps a large tensor's state in f32, True
    quantizes a small one; the same steps as bitsandbytes' AdamW8bit with those parameters
    overridden in its GlobalOptimManager (optim_bits=32; min_8bit_size=0)."""
    mng = bnb.optim.GlobalOptimManager.get_instance()
    g = torch.Generator().manual_seed(3)
    start = [torch.randn(s, generator=g) for s in ((64, 300), (10000,), (300,), (100,))]

    def steps(make):
        ps = [torch.nn.Parameter(t.clone()) for t in start]
        opt = make(ps)
        for k in range(10):
            gg = torch.Generator().manual_seed(k)
            for p in ps:
                p.grad = torch.randn(p.shape, generator=gg) * 0.1
            opt.step()
        return ps, opt

    def theirs_make(ps):
        opt = bnb.optim.AdamW8bit(ps, lr=1e-2)
        mng.override_config(ps[0], "optim_bits", 32)
        mng.override_config(ps[2], "min_8bit_size", 0)
        return opt

    try:
        theirs, tb = steps(theirs_make)
    finally:
        mng.initialize()
    ours, to = steps(lambda ps: ot.AdamW(
        [{"params": [ps[0]], "quantize_state": False}, {"params": [ps[1], ps[3]]},
         {"params": [ps[2]], "quantize_state": True}], lr=1e-2, state_format="8bit"))
    kinds = [to.state[p]["exp_avg"].dtype for p in ours]
    assert kinds == [torch.uint8 if tb.state[p]["state1"].dtype == torch.uint8 else torch.float32
                     for p in theirs]
    assert kinds == [torch.float32, torch.uint8, torch.uint8, torch.float32]
    for mine, their in (("exp_avg", "state1"), ("exp_avg_sq", "state2")):
        for p, q in zip(theirs, ours):
            a, b = tb.state[p][their], to.state[q][mine]
            if a.dtype == torch.uint8:
                assert (a == b).double().mean().item() >= 0.9995, (mine, q.shape)
            else:
                assert torch.allclose(a, b, rtol=1e-5, atol=1e-7), (mine, q.shape)
    for p, q in zip(theirs, ours):
        assert (p - q).abs().max().item() <= 1e-3, q.shape  # lr / 10
    with pytest.raises(optjit.Error, match="a param group's 'quantize_state' is 'no': True, "
                                           "False or None"):
        steps(lambda ps: ot.AdamW([{"params": ps, "quantize_state": "no"}], state_format="8bit"))


def test_unsigned_formats_refuse_a_state_that_may_become_negative():
    """q8u and q4u hold only values >= 0: a first moment stored in one lost its sign, silently
    (0.95 from torch.optim.AdamW after 5 steps with q4u). Now the optimizer is refused with the
    state named; the second moments, proved >= 0, are accepted and step as torch does."""
    w = torch.nn.Parameter(torch.randn(8192, generator=torch.Generator().manual_seed(0)))
    for fmt in ("q8u", "exp_avg:q4u", "exp_avg:q8u,exp_avg_sq:q8u"):
        with pytest.raises(optjit.Error,
                           match=r"state 'exp_avg' may become negative \(its new value, %\d+\) "
                                 r"whatever the hyperparameters .* holds only values >= 0"):
            ot.AdamW([w], lr=0.01, state_format=fmt)
    # torch.optim.RMSprop allows alpha > 1, where alpha * v + (1 - alpha) * g^2 may be < 0: the
    # message names alpha, and does not ask to bound it (its bounds are torch's).
    with pytest.raises(optjit.Error, match=r"for some allowed values of 'rmsprop.alpha' in "
                                           r"\[0, inf\] \(at its given value, 0.99, it "
                                           r"cannot\)") as e:
        ot.RMSprop([w], state_format="q8u")
    assert "narrow" not in str(e.value)
    ref = torch.nn.Parameter(w.detach().clone())
    opt = ot.AdamW([w], lr=0.01, state_format="exp_avg:q8,exp_avg_sq:q8u")
    oracle = torch.optim.AdamW([ref], lr=0.01)
    for k in range(5):
        g = torch.randn(8192, generator=torch.Generator().manual_seed(10 + k))
        w.grad, ref.grad = g.clone(), g.clone()
        opt.step()
        oracle.step()
    # 8-bit state: within a few steps of lr of torch's f32 state (q4u on exp_avg was 0.95 off).
    assert (w - ref).abs().max().item() < 0.01


def test_a_negative_second_moment_in_a_checkpoint_is_refused_by_unsigned_state():
    """A checkpoint whose exp_avg_sq has a negative value is not AdamW's (it never is one), and
    q8u would quantize it to 0: loading it into 8-bit state raises, naming the element; f32
    state takes it as it is."""
    w = torch.nn.Parameter(torch.randn(256 * 20))
    ref = torch.optim.AdamW([w], lr=1e-2)
    w.grad = torch.randn_like(w)
    ref.step()
    saved = copy.deepcopy(ref.state_dict())
    saved["state"][0]["exp_avg_sq"][77] = -0.25
    mine = torch.nn.Parameter(w.detach().clone())
    opt = ot.AdamW([mine], lr=1e-2, state_format="8bit")
    with pytest.raises(optjit.Error, match=r"optimizer.state\[p\]\['exp_avg_sq'\] of parameter 0 "
                       r"is -0.25 at element 77, and this optimizer keeps it as q8u"):
        opt.load_state_dict(copy.deepcopy(saved))
        mine.grad = torch.randn_like(mine)
        opt.step()
    f32 = ot.AdamW([mine], lr=1e-2)
    f32.load_state_dict(copy.deepcopy(saved))
    assert f32.state[mine]["exp_avg_sq"][77].item() == -0.25
