"""optjit.torch on the WebGPU backend (wgpu-native on lavapipe here): CPU tensors stepped on the
adapter, against torch itself; bf16 parameters; the refusal of what WGSL cannot run."""
import pytest
import torch

import optjit.torch as ot


def _pair(dtype=torch.float32, sizes=(64, 48, 7)):
    torch.manual_seed(0)
    i, h, o = sizes
    a = torch.nn.Sequential(torch.nn.Linear(i, h), torch.nn.Tanh(), torch.nn.Linear(h, o))
    b = torch.nn.Sequential(torch.nn.Linear(i, h), torch.nn.Tanh(), torch.nn.Linear(h, o))
    b.load_state_dict(a.state_dict())
    return a.to(dtype), b.to(dtype)


def _train(runs, steps, seed, width, dtype=torch.float32, before_step=lambda: None):
    """Each (model, optimizer) of `runs` on the same batches: backward, before_step(), step."""
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randn(16, width, generator=g).to(dtype)
        for model, opt in runs:
            opt.zero_grad()
            model(x).float().square().mean().backward()
        before_step()
        for _, opt in runs:
            opt.step()


def test_adamw_with_fused_clip_on_webgpu_steps_as_torch():
    mine, ref = _pair()
    o = ot.AdamW(mine.parameters(), lr=1e-2, weight_decay=0.1, max_grad_norm=0.5, backend="webgpu")
    r = torch.optim.AdamW(ref.parameters(), lr=1e-2, weight_decay=0.1)
    _train(((mine, o), (ref, r)), 6, 1, 64,
           before_step=lambda: torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.5))
    diff = max((a - b).abs().max().item() for a, b in zip(mine.parameters(), ref.parameters()))
    assert diff < 1e-5, diff
    # The state is torch's, in torch's names.
    w = next(mine.parameters())
    assert o.state[w]["exp_avg"].shape == w.shape and int(o.state[w]["step"]) == 6


def test_bf16_parameters_on_webgpu_match_the_cpu_backend_bit_for_bit():
    a, _ = _pair(torch.bfloat16)
    b, _ = _pair(torch.bfloat16)
    oa = ot.SGD(a.parameters(), lr=0.1, momentum=0.9, backend="webgpu")
    ob = ot.SGD(b.parameters(), lr=0.1, momentum=0.9, backend="cpu")
    _train(((a, oa), (b, ob)), 4, 2, 64, torch.bfloat16)
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)


def test_float64_on_webgpu_is_refused_with_the_reason():
    mine, _ = _pair(torch.float64)
    o = ot.AdamW(mine.parameters(), lr=1e-3, backend="webgpu")
    mine(torch.randn(2, 64, dtype=torch.float64)).sum().backward()
    with pytest.raises(Exception, match="WGSL has no f64"):
        o.step()


def test_8bit_state_on_webgpu_is_the_cpu_backends_codes_and_scales():
    # bitsandbytes' 8-bit blockwise state (Linear(64, 48)'s 3072-element weight stays f32, as
    # bitsandbytes keeps tensors under 4096 elements; the 64x96 one is quantized).
    a, b = _pair(sizes=(96, 64, 48))
    oa = ot.AdamW(a.parameters(), lr=1e-2, weight_decay=0.1, state_format="8bit", backend="webgpu")
    ob = ot.AdamW(b.parameters(), lr=1e-2, weight_decay=0.1, state_format="8bit", backend="cpu")
    _train(((a, oa), (b, ob)), 5, 3, 96)
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)
    w, v = next(a.parameters()), next(b.parameters())
    sa, sb = oa.state_dict()["state"][0], ob.state_dict()["state"][0]
    assert oa.state[w]["exp_avg"].dtype == torch.uint8
    assert sa.keys() == sb.keys()
    for key in sb:
        if key.endswith(".format"):  # the quantized state's format, "q8" or "q8u"
            assert sa[key] == sb[key], key
        else:
            assert torch.equal(torch.as_tensor(sa[key]), torch.as_tensor(sb[key])), key
    assert any(k.endswith("absmax") for k in sb), sorted(sb)


def _wgpu_device():
    wgpu = pytest.importorskip("wgpu")
    import os
    os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")  # Mesa asks for one
    return wgpu, wgpu.gpu.request_adapter_sync().request_device_sync()


def test_wgpu_py_buffers_are_stepped_in_place_on_the_applications_device():
    import numpy as np

    import optjit.webgpu

    wgpu, device = _wgpu_device()
    usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
    rng = np.random.default_rng(3)
    p0 = rng.standard_normal(377).astype(np.float32)
    grads = [rng.standard_normal(377).astype(np.float32) for _ in range(3)]
    params = device.create_buffer_with_data(data=p0, usage=usage)
    gbuf = device.create_buffer(size=377 * 4, usage=usage)
    opt = optjit.webgpu.Optimizer(
        "chain(clip_grad_norm(max_norm=1.0), adamw(lr=1e-2, weight_decay=0.1))", device,
        {"a": (params, 0, (300,)), "b": (params, 1200, (77,))}, cache=False)
    # torch, the oracle: the same two tensors, clipped together, then AdamW.
    ta = torch.tensor(p0[:300], requires_grad=True)
    tb = torch.tensor(p0[300:], requires_grad=True)
    ref = torch.optim.AdamW([ta, tb], lr=1e-2, weight_decay=0.1)
    for g in grads:
        device.queue.write_buffer(gbuf, 0, g)
        assert opt.step([(gbuf, 0), (gbuf, 1200)]) is False
        ta.grad, tb.grad = torch.tensor(g[:300]), torch.tensor(g[300:])
        torch.nn.utils.clip_grad_norm_([ta, tb], 1.0)
        ref.step()
    got = np.frombuffer(device.queue.read_buffer(params), np.float32)
    want = torch.cat([ta.detach(), tb.detach()]).numpy()
    assert np.abs(got - want).max() < 1e-5
    assert opt.step_count == 3 and opt.backend == "webgpu"
    # A buffer optjit cannot bind is an error naming it, not a crash.
    bad = device.create_buffer(size=377 * 4, usage=wgpu.BufferUsage.COPY_DST)
    with pytest.raises(optjit.Error, match="the gradient of 'a': the WebGPU buffer lacks usage"):
        opt.step([(bad, 0), (gbuf, 1200)])
    with pytest.raises(optjit.Error, match="parameters 'a' and 'b' overlap in device memory"):
        optjit.webgpu.Optimizer("sgd(lr=0.1)", device,
                                {"a": (params, 0, (300,)), "b": (params, 1196, (77,))})
    # So are arguments of the wrong kind (a negative offset was nanobind's TypeError, a list of
    # parameters an AttributeError).
    with pytest.raises(optjit.Error, match=r"^parameter 'a': a byte offset is a whole number, "
                                           r"0 or more, not -4$"):
        optjit.webgpu.Optimizer("sgd(lr=0.1)", device, {"a": (params, -4, (300,))})
    with pytest.raises(optjit.Error, match=r"^params is a dict \{name: \(buffer, byte_offset, "
                                           r"shape\[, dtype\]\)\}, not a list$"):
        optjit.webgpu.Optimizer("sgd(lr=0.1)", device, [("a", (params, 0, (300,)))])
    with pytest.raises(optjit.Error, match=r"^gradient 1: a byte offset is a whole number, 0 or "
                                           r"more, not '1200'$"):
        opt.step([(gbuf, np.int64(0)), (gbuf, "1200")])
    with pytest.raises(optjit.Error, match=r"^gradient 0: expected \(buffer, byte_offset\), not "):
        opt.step([gbuf, (gbuf, 1200)])
    assert opt.step_count == 3


def test_wgpu_py_buffers_given_only_to_the_optimizer_stay_alive_with_it():
    """The engine holds the buffers' handles: a buffer given only to the optimizer (its Python
    object dropped) must not be released while the optimizer steps it."""
    import gc
    import weakref

    import numpy as np

    import optjit.webgpu

    wgpu, device = _wgpu_device()
    usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
    params = device.create_buffer_with_data(data=np.ones(64, np.float32), usage=usage)
    held = weakref.ref(params)
    opt = optjit.webgpu.Optimizer("sgd(lr=0.5)", device, {"w": (params, 0, (64,))}, cache=False)
    del params
    gc.collect()
    assert held() is not None
    grad = device.create_buffer_with_data(data=np.full(64, 2.0, np.float32), usage=usage)
    assert opt.step([(grad, 0)]) is False
    got = np.frombuffer(device.queue.read_buffer(held()), np.float32)
    assert np.array_equal(got, np.zeros(64, np.float32))  # 1 - 0.5 * 2
    del opt
    gc.collect()
    assert held() is None


# Run in a child process (test_a_destroyed_or_foreign_buffer_is_an_error_not_an_abort): before
# the fix each of these aborted the process from inside wgpu-native.
_BAD_BUFFERS = """
import json, os
import numpy as np, wgpu
import optjit, optjit.webgpu as ow
os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")
usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
device, other = (wgpu.gpu.request_adapter_sync().request_device_sync() for _ in range(2))
def ones(n, d=device):
    return d.create_buffer_with_data(data=np.ones(n, np.float32), usage=usage)
def params(b):
    return np.frombuffer(device.queue.read_buffer(b), np.float32)[:110].tolist()
out = {}
def attempt(case, f):
    try:
        f()
        out[case] = "stepped"
    except optjit.Error as e:
        out[case] = str(e)
P, G = ones(1000), ones(1000)
opt = ow.Optimizer("sgd(lr=0.25)", device, {"w": (P, 0, (10,)), "b": (P, 400, (10,))},
                   cache=False)
attempt("foreign gradient", lambda: opt.step([(ones(100, other), 0), (G, 0)]))
out["untouched"] = params(P)
opt.step([(G, 0), (G, 40)])
out["then"] = params(P)
Q = ones(100)
opt2 = ow.Optimizer("sgd(lr=0.25)", device, {"w": (Q, 0, (10,))}, cache=False)
opt2.step([(G, 0)])
Q.destroy()
attempt("destroyed parameter", lambda: opt2.step([(G, 0)]))
attempt("saved after", lambda: opt2.save(os.path.join(os.environ["OUT"], "s.safetensors")))
R, H = ones(100), ones(100)
opt3 = ow.Optimizer("adamw(lr=0.25)", device, {"w": (R, 0, (10,))}, cache=False)
opt3.step([(H, 0)])
H.destroy()
attempt("destroyed gradient", lambda: opt3.step([(H, 0)]))
print(json.dumps(out))
"""


def test_a_destroyed_or_foreign_buffer_is_an_error_not_an_abort(tmp_path):
    """A gradient in another device's buffer (copied into optjit's arena), a parameter or
    gradient buffer the caller destroyed after a step (named by a kept bind group), and a save
    reading a destroyed parameter buffer back: wgpu-native takes an invalid submission as fatal,
    so these aborted the process; each is an error now, and a failed step leaves the parameters
    as they were."""
    import json
    import os
    import subprocess
    import sys

    _wgpu_device()
    r = subprocess.run([sys.executable, "-c", _BAD_BUFFERS], capture_output=True, text=True,
                       timeout=300, env=dict(os.environ, OUT=str(tmp_path)))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["foreign gradient"].startswith("WebGPU: copying a buffer failed"), got
    assert "doesn't match Device" in got["foreign gradient"], got
    for case in ("destroyed parameter", "destroyed gradient"):
        assert got[case].startswith("WebGPU: binding the arguments of optjit_pass_0 failed"), got
        assert got[case].endswith("has been destroyed"), got
    assert got["saved after"].startswith("WebGPU: reading a buffer back failed"), got
    assert got["saved after"].endswith("has been destroyed"), got
    assert got["untouched"] == [1.0] * 110
    assert got["then"] == [0.75] * 10 + [1.0] * 90 + [0.75] * 10


def test_wgpu_py_and_optjit_on_different_libraries_is_an_error(monkeypatch):
    import optjit.webgpu

    _, device = _wgpu_device()
    monkeypatch.setattr(optjit.webgpu, "webgpu_library", lambda: "/elsewhere/libwgpu_native.so")
    with pytest.raises(optjit.Error, match="their devices and buffers do not mix"):
        optjit.webgpu.Optimizer("sgd(lr=0.1)", device, {})
