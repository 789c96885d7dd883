"""torchao's low-bit optimizers (``torchao.optim``) as optjit's fused steps, by one import line::

    from optjit.torchao.optim import AdamW8bit        # was: from torchao.optim import AdamW8bit
    opt = AdamW8bit(model.parameters(), lr=1e-3)
    # or, where a library makes it (transformers' Trainer, optim="adamw_torch_4bit"):
    #     optjit.torchao.install()

The classes have torchao's names, signatures and defaults: ``Adam8bit``, ``AdamW8bit``,
``Adam4bit``, ``AdamW4bit``, ``AdamFp8``, ``AdamWFp8``. Where torchao compiles one kernel per
parameter with torch.compile (and recompiles per shape), optjit steps every parameter in one
fused pass, compiled once. As in torchao:

- a parameter's state is quantized when it has at least 4096 elements and is a multiple of
  the block (256; 128 for 4-bit); other parameters keep plain state;
- Adam adds the weight decay to the gradient, AdamW decouples it; ``amsgrad`` keeps a
  quantized maximum of the second moment (torchao 0.18's own step with it fails on the CPU:
  torch.compile finds no ``aten.maximum`` for its state subclasses);
- ``param_groups[i]["lr"]`` is a float32 tensor, so ``group["lr"].fill_(x)`` sets it (a float
  works too);
- ``bf16_stochastic_round=True`` rounds bfloat16 parameters stochastically, here with
  optjit's deterministic generator (the same bits for any thread count or backend, where
  torchao draws from torch.rand).

The results: 4-bit and fp8 state use torchao's maps, blocks, quantizers and packing; 8-bit
state uses the same maps and blocks with bitsandbytes' CPU quantizer (a table that can pick a
code a few entries from the nearest below |x| / absmax ~ 1e-4), and optjit updates the moments
as torch's AdamW does where torchao uses lerp. Each is within one quantization step of
torchao's state after a step from the same state (python/tests/test_quantized_state.py and
test_dropins.py measure it). Plain state is f32, where torchao keeps it in the
parameter's dtype (bfloat16 parameters: bfloat16 state).

``state_dict()`` holds torchao's own state subclasses (``OptimState8bit``, ``OptimState4bit``,
``OptimStateFp8``) over the same codes and scales where torchao is installed, so torchao's
class loads the checkpoint and steps on (under FSDP2, as torchao keeps them: DTensors over
the subclass of each shard; codes whose blocks follow a channels_last parameter's memory order
are written as their values: torchao blocks row-major); without torchao, optjit's codes and
scales. ``load_state_dict`` takes torchao's (FSDP2's too) and optjit's.

``block_size`` is torchao's default (256; 128 for 4-bit), or 256 for 4-bit too (state_format
``"4bit_b256"``: transformers' Trainer gives AdamW4bit that block); others are refused.
optjit's own keywords pass through (``max_grad_norm=`` fuses gradient clipping into the step,
``backend=``, ...).
"""

import importlib.util
import sys
import types
from typing import Any, Dict, Optional

import torch

from . import torch as _ot
from ._optjit import Error, quant_map

class _Torchao:
    """What the classes below share: torchao's rule for which parameters' state is quantized,
    and its learning rate as a tensor."""

    _pickled = _ot._Builtin._pickled + ("_block",)

    def add_param_group(self, param_group: Dict[str, Any]) -> None:
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        if not isinstance(group["lr"], torch.Tensor):  # torchao's: a tensor, set with fill_
            group["lr"] = torch.tensor(group["lr"], dtype=torch.float32)

    def state_dict(self) -> Dict[str, Any]:
        """torchao's state dict where torchao is installed: each quantized state as torchao's
        own state subclass (OptimState8bit, OptimState4bit, OptimStateFp8) over the same codes
        and scales, so that torchao's class loads it and steps on; without torchao, optjit's
        codes and scales ("exp_avg", "exp_avg.absmax", "exp_avg.format"), which these classes
        and optjit.torch load."""
        sd = super().state_dict()
        states = _torchao_states()
        if states is not None:
            params = self._params()
            sd["state"] = {pid: _to_torchao(st, params[pid], states)
                           if isinstance(st, dict) and isinstance(pid, int) else st
                           for pid, st in sd["state"].items()}
        return sd

    def _state_quantized(self, p: torch.Tensor, group: Dict[str, Any]) -> Optional[bool]:
        st = self.state.get(p, {})
        held = st.get("exp_avg")
        if isinstance(held, torch.Tensor):  # state it has (loaded, stepped): as it is
            return held.dtype == torch.uint8
        n = _ot._local(p).numel()
        return n >= 4096 and n % self._block == 0


def _torchao_states():
    """torchao's three optimizer state subclasses, or None where torchao is not installed."""
    if "torchao" not in sys.modules and importlib.util.find_spec("torchao") is None:
        return None
    from torchao.optim.subclass_4bit import OptimState4bit
    from torchao.optim.subclass_8bit import OptimState8bit
    from torchao.optim.subclass_fp8 import OptimStateFp8
    return OptimState8bit, OptimState4bit, OptimStateFp8


def _to_torchao(st: Dict[str, Any], p: torch.Tensor, states) -> Dict[str, Any]:
    """One parameter's state with its quantized states as torchao's subclasses (for an FSDP2
    parameter, as torchao keeps them: a DTensor over the subclass of the local shard's codes
    and scales). Codes whose blocks follow another memory order than torchao's row-major one
    (a channels_last parameter's) are written as their values, which torchao steps as plain
    state."""
    state8, state4, state_f8 = states
    sharded = _ot._is_dtensor(p)  # FSDP2's: torchao wraps a subclass of the local shard
    lp = _ot._local(p)
    st = dict(st)
    for name in ("exp_avg", "exp_avg_sq", "max_exp_avg_sq"):
        t = st.get(name)
        if isinstance(t, torch.Tensor) and t.dtype == torch.uint8 and name + ".format" not in st:
            raise Error(f"state '{name}' holds codes of no known format: torchao's state dict "
                        f"cannot hold them")
    for key in [k for k in st if isinstance(k, str) and k.endswith(".format")]:
        name, fmt = key[:-len(".format")], st[key]
        codes, scale = st.get(name), st.get(name + ".absmax")
        order = st.get(name + ".strides")
        if not isinstance(codes, torch.Tensor) or not isinstance(scale, torch.Tensor):
            continue
        codes, scale = _ot._local(codes), _ot._local(scale)  # (a shard's: by rows, flat)
        qmap = torch.tensor(quant_map(fmt), dtype=torch.float32, device=codes.device)
        flat = qmap.numel() == 16  # 4-bit: two codes a byte, in the order `order` gives
        signed = bool(qmap[0] < 0)
        if flat:
            row_major = order is None or all(
                a == b for a, b, n in zip(order, _row_major_strides(p.shape), p.shape) if n > 1)
        else:
            row_major = codes.shape == lp.shape and codes.is_contiguous()
        scale = scale.float().flatten()
        if not row_major:
            new = _ot._dequantize(fmt, codes, scale, lp)
        elif fmt == "f8":
            new = state_f8(codes.view(torch.float8_e4m3fn), scale, dtype=p.dtype)
        elif flat:
            new = state4(codes.flatten(), scale, qmap, signed, lp.shape, dtype=p.dtype)
        else:
            new = state8(codes, scale, qmap, signed, dtype=p.dtype)
        if sharded:  # as torchao's _new_buffer wraps its own
            from torch.distributed.tensor import DTensor
            new = DTensor.from_local(new, p.device_mesh, p.placements, run_check=False,
                                     shape=p.shape, stride=p.stride())
        st[name] = new
        for k in (key, name + ".absmax", name + ".strides"):
            st.pop(k, None)
    return st


def _row_major_strides(shape) -> list:
    strides, n = [], 1
    for d in reversed(shape):
        strides.append(n)
        n *= d
    return strides[::-1]


# optjit's state format for each block size torchao's classes may be given, by their default
# format: 4-bit in blocks of 256 too (transformers' Trainer makes "adamw_torch_4bit" so).
_BLOCKS = {"8bit": {256: "8bit"}, "4bit": {128: "4bit", 256: "4bit_b256"}, "f8": {256: "f8"}}


def _make(name: str, base: type, state_format: str, block: int, weight_decay: float) -> type:
    signature = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=weight_decay,
                     amsgrad=False)

    def __init__(self, params, *args, block_size=block, bf16_stochastic_round=False, **kwargs):
        v, extra = _ot._peer_arguments(name, signature, args, kwargs)
        blocks = _BLOCKS[state_format]
        if block_size not in blocks:
            raise Error(f"{name}(block_size={block_size!r}): optjit's {state_format} state "
                        f"quantizes blocks of {' or '.join(map(str, blocks))} elements only "
                        f"(torchao's default is {block})")
        if bf16_stochastic_round:
            if extra.get("param_rounding", "stochastic") != "stochastic":
                raise Error(f"{name}: bf16_stochastic_round=True and param_rounding="
                            f"{extra['param_rounding']!r} disagree")
            extra["param_rounding"] = "stochastic"
        self._block = block_size
        base.__init__(self, params, **v, state_format=blocks[block_size], **extra)

    __init__.__signature__ = _ot._peer_signature(
        signature, dict(block_size=block, bf16_stochastic_round=False))
    what = "AdamW" if base is _ot.AdamW else "Adam"
    doc = (f"torchao.optim.{name} as optjit's fused step: {what} with {state_format} state "
           f"(torchao's signature and defaults; see optjit.torchao)")
    return type(name, (_Torchao, base), {"__init__": __init__, "__doc__": doc,
                                         "__module__": __name__})


Adam8bit = _make("Adam8bit", _ot.Adam, "8bit", 256, 0.0)
AdamW8bit = _make("AdamW8bit", _ot.AdamW, "8bit", 256, 1e-2)
Adam4bit = _make("Adam4bit", _ot.Adam, "4bit", 128, 0.0)
AdamW4bit = _make("AdamW4bit", _ot.AdamW, "4bit", 128, 1e-2)
AdamFp8 = _make("AdamFp8", _ot.Adam, "f8", 256, 0.0)
AdamWFp8 = _make("AdamWFp8", _ot.AdamW, "f8", 256, 1e-2)

__all__ = ["Adam8bit", "AdamW8bit", "Adam4bit", "AdamW4bit", "AdamFp8", "AdamWFp8"]


def install(defer_clip: bool = True) -> "_ot.Installed":
    """These classes in place of torchao's own in torchao's modules, for code that makes the
    optimizer itself (a trainer given ``optim="adamw_torch_4bit"`` imports
    ``torchao.optim.AdamW4bit``)::

        optjit.torchao.install()            # or: with optjit.torchao.install(): ...

    Code that found torchao's classes before keeps them. With ``defer_clip`` (the default),
    ``torch.nn.utils.clip_grad_norm_`` is ``optjit.torch.clip_grad_norm_``: the gradients are
    scaled inside the fused step (see ``optjit.torch.install``). The returned handle's
    ``uninstall()`` (or leaving the ``with`` block) puts torchao's and torch's back."""
    return _ot._install("torchao", {n: globals()[n] for n in __all__}, defer_clip)

# `from optjit.torchao.optim import AdamW8bit`, as torchao spells it.
optim = types.ModuleType(__name__ + ".optim", "torchao.optim's low-bit optimizers (optjit.torchao)")
for _name in __all__:
    setattr(optim, _name, globals()[_name])
optim.__all__ = list(__all__)
sys.modules[optim.__name__] = optim
