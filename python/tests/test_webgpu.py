"""optjit.torch on the WebGPU backend (wgpu-native on lavapipe here): CPU tensors stepped on the
adapter, against torch itself; bf16 parameters; the refusal of what WGSL cannot run."""
import pytest
import torch

import optjit.torch as ot


def _pair(dtype=torch.float32):
    torch.manual_seed(0)
    a = torch.nn.Sequential(torch.nn.Linear(64, 48), torch.nn.Tanh(), torch.nn.Linear(48, 7))
    b = torch.nn.Sequential(torch.nn.Linear(64, 48), torch.nn.Tanh(), torch.nn.Linear(48, 7))
    b.load_state_dict(a.state_dict())
    return a.to(dtype), b.to(dtype)


def test_adamw_with_fused_clip_on_webgpu_steps_as_torch():
    mine, ref = _pair()
    o = ot.AdamW(mine.parameters(), lr=1e-2, weight_decay=0.1, max_grad_norm=0.5, backend="webgpu")
    r = torch.optim.AdamW(ref.parameters(), lr=1e-2, weight_decay=0.1)
    g = torch.Generator().manual_seed(1)
    for _ in range(6):
        x = torch.randn(16, 64, generator=g)
        for model, opt in ((mine, o), (ref, r)):
            opt.zero_grad()
            model(x).square().mean().backward()
        torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.5)
        o.step()
        r.step()
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
    g = torch.Generator().manual_seed(2)
    for _ in range(4):
        x = torch.randn(16, 64, generator=g).to(torch.bfloat16)
        for model, opt in ((a, oa), (b, ob)):
            opt.zero_grad()
            model(x).float().square().mean().backward()
        oa.step()
        ob.step()
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
    torch.manual_seed(0)
    a = torch.nn.Sequential(torch.nn.Linear(96, 64), torch.nn.Tanh(), torch.nn.Linear(64, 48))
    b = torch.nn.Sequential(torch.nn.Linear(96, 64), torch.nn.Tanh(), torch.nn.Linear(64, 48))
    b.load_state_dict(a.state_dict())
    oa = ot.AdamW(a.parameters(), lr=1e-2, weight_decay=0.1, state_format="8bit", backend="webgpu")
    ob = ot.AdamW(b.parameters(), lr=1e-2, weight_decay=0.1, state_format="8bit", backend="cpu")
    g = torch.Generator().manual_seed(3)
    for _ in range(5):
        x = torch.randn(16, 96, generator=g)
        for model, opt in ((a, oa), (b, ob)):
            opt.zero_grad()
            model(x).square().mean().backward()
        oa.step()
        ob.step()
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)
    w, v = next(a.parameters()), next(b.parameters())
    sa, sb = oa.state_dict()["state"][0], ob.state_dict()["state"][0]
    assert oa.state[w]["exp_avg"].dtype == torch.uint8
    for key in sb:
        assert torch.equal(torch.as_tensor(sa[key]), torch.as_tensor(sb[key])), key
    assert any(k.endswith("absmax") for k in sb), sorted(sb)
