"""optjit for PyTorch: a ``torch.optim.Optimizer`` whose step is one fused optjit pipeline.

Change one import line::

    from optjit.torch import AdamW            # instead of torch.optim.AdamW
    opt = AdamW(model.parameters(), lr=1e-3, weight_decay=0.01, max_grad_norm=1.0)

Everything torch users rely on keeps working: parameter groups with their own hyperparameters
and ``add_param_group``; ``step(closure)``; parameters whose ``.grad`` is None are skipped;
``zero_grad``; ``state_dict()`` / ``load_state_dict()`` in torch's own format and state names
(a checkpoint of ``torch.optim.AdamW`` loads into ``optjit.torch.AdamW`` and back); the state
tensors in ``optimizer.state[p]``; learning-rate schedulers, which write ``param_groups`` that
the next step reads as runtime values (nothing recompiles). Clipping can be fused into the step
(``max_grad_norm=``), and any pipeline text works through :class:`Optimizer`.
``import optjit.torch as optim`` in place of ``import torch.optim as optim`` keeps the rest
working: ``optim.lr_scheduler`` is torch's, and torch.optim's optimizers that optjit has no
fused step for (Adafactor, LBFGS, SparseAdam, Muon) are torch's own, with a warning.

The state lives in torch tensors that optjit updates in place; parameters, gradients and state
are never copied. CPU tensors step on optjit's CPU backend (LLVM JIT), CUDA tensors on the GPU
on the current stream.

Where a library makes the optimizer itself (transformers' Trainer with ``optim="adamw_torch"``),
``optjit.torch.install()`` first puts these classes in torch.optim's place (see ``install``),
and torch's ``clip_grad_norm_`` defers its scaling of the gradients into the fused step (see
``clip_grad_norm_``).
"""
from __future__ import annotations

import atexit
import collections
import functools
import inspect
import math
import re
import sys
import threading
import types
import warnings
import weakref
from typing import Any, Callable, Dict, Iterable, List, Optional, Set, Tuple, Union

import torch
import torch.utils.dlpack

from . import _optjit

Error = _optjit.Error

# Keys torch optimizers accept that change nothing here (optjit's step is already fused).
_IGNORED = {"foreach", "fused", "capturable", "differentiable"}


def _number(x: Any, what: str = "a hyperparameter") -> str:
    """A hyperparameter value as pipeline text (exact: Python's repr round-trips); else an
    error naming `what`."""
    if isinstance(x, torch.Tensor) and x.numel() == 1:
        x = x.item()
    if isinstance(x, bool):
        return "true" if x else "false"
    if isinstance(x, (tuple, list)):
        return "(" + ", ".join(_number(v, what) for v in x) + ")"
    x = _number_of(x, what)
    if math.isnan(x):
        return "nan"  # refused where torch refuses it, with a message naming it
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return repr(x)


def _scalar_dtype() -> torch.dtype:
    """The dtype torch keeps 'step' and scalar states in (torch.optim's _get_scalar_dtype)."""
    return torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32


def _float(x: Any) -> float:
    """float(x), but not of a string: float() reads "0.1", where torch's steps fail."""
    if isinstance(x, (str, bytes)):
        raise TypeError(f"{x!r} is a string, not a number")
    return float(x)


def _values(x: Any) -> List[float]:
    if isinstance(x, torch.Tensor):
        return [float(v) for v in x.reshape(-1).tolist()]
    if isinstance(x, (tuple, list)):
        return [_float(v.item() if isinstance(v, torch.Tensor) else v) for v in x]
    return [_float(x)]


def _memory_order(t: torch.Tensor) -> torch.Tensor:
    """A dense tensor's elements as they lie in memory (channels_last included), 1-d."""
    return t.as_strided((t.numel(),), (1,))


def _dense_strides(shape, strides) -> bool:
    """Whether `strides` lay out `shape` with no gap and no overlap, in some order of its
    dimensions (row-major, channels_last, ...)."""
    if len(shape) != len(strides):
        return False
    expect = 1
    for stride, size in sorted((st, n) for st, n in zip(strides, shape) if n > 1):
        if stride != expect:
            return False
        expect *= size
    return True


def _same_layout(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors of one shape hold their elements in the same memory order."""
    return all(sa == sb for sa, sb, n in zip(a.stride(), b.stride(), a.shape) if n > 1)


def _number_of(value: Any, what: str) -> float:
    """A one-element tensor or a number as a float; else (a string too) an error naming
    `what`."""
    try:
        return _float(value)
    except (TypeError, ValueError, RuntimeError):
        text = repr(value)
        raise Error(f"{what} is {text if len(text) < 60 else text[:57] + '...'}, not a "
                    f"number") from None


@functools.lru_cache(maxsize=64)
def _scalar_state_names(pipeline: str, dtype: torch.dtype) -> frozenset:
    """The program's scalar states (NAdam's mu_product, ASGD's eta and mu) for parameters of
    `dtype`: only these of a parameter's 0-d states are one value per group in an engine. A 0-d
    parameter's moments are 0-d too, and differ from parameter to parameter."""
    return frozenset(_optjit.scalar_states(pipeline, _DTYPE_NAMES.get(dtype.to_real(), "f32")))


def _restart_without_buffer(st: Optional[Dict[str, Any]], buffer: str) -> bool:
    """A parameter's state that has stepped but has no `buffer` of its own (none, or the zeros a
    program kept for it; quantized: zero where every block's absmax is) counts its steps from 0
    again, without the buffer: the program then starts it as torch does at the first step that
    finds none. Whether it did."""
    if not st or "step" not in st:
        return False
    held = st.get(buffer + ".absmax", st.get(buffer))
    if held is not None and (not isinstance(held, torch.Tensor) or held.any()):
        return False  # its own buffer (or one the engine will refuse by name)
    st.pop(buffer, None)
    st.pop(buffer + ".absmax", None)
    st["step"] = torch.zeros((), dtype=_scalar_dtype())
    return True


def _step_count(value: Any, i: int) -> int:
    """A state's 'step' (a tensor or a number) as the whole number of steps it counts."""
    v = _number_of(value, f"optimizer.state[p]['step'] of parameter {i}")
    if not (math.isfinite(v) and v >= 0 and v == int(v) and v < 2**53):
        raise Error(f"optimizer.state[p]['step'] of parameter {i} is {v}: a step count is a "
                    f"whole number from 0 to 2^53")
    return int(v)


def _local(t: torch.Tensor) -> torch.Tensor:
    """A DTensor's local shard (FSDP2's parameters and gradients); any other tensor itself."""
    return t.to_local() if _is_dtensor(t) else t


def _array(t: torch.Tensor) -> torch.Tensor:
    """What the engine steps of a parameter or gradient: its local shard, and of a complex
    tensor its real view (torch's optimizers step complex parameters as pairs of reals, through
    torch.view_as_real)."""
    t = _local(t)
    return torch.view_as_real(t) if t.is_complex() else t


_STEPPED_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.complex64,
                   torch.complex128, torch.complex32)


def _torchao_codes(t) -> Optional[Tuple[str, torch.Tensor, torch.Tensor]]:
    """(optjit format, codes, scales) of a torchao optimizer state (OptimState8bit,
    OptimState4bit, OptimStateFp8) whose map, block and packing are one of optjit's formats
    (4-bit: two to a byte, the even element high, as optjit's); else None. Copies: torchao's
    state dict holds its live states."""
    codes, scale = getattr(t, "codes", None), getattr(t, "scale", None)
    if not isinstance(codes, torch.Tensor) or not isinstance(scale, torch.Tensor):
        return None
    block = getattr(t, "block_size", None)
    if codes.dtype == torch.float8_e4m3fn and block == 256:
        fmt = "f8"
    else:
        qmap = getattr(t, "qmap", None)
        if codes.dtype != torch.uint8 or not isinstance(qmap, torch.Tensor):
            return None
        values = qmap.float().tolist()
        fmt = next((f for f in _optjit.quant_formats()
                    if _optjit.quant_block(f) == block and values == _optjit.quant_map(f)), None)
        if fmt is None:
            return None
    return fmt, codes.detach().view(torch.uint8).clone(), scale.detach().float().clone()


def _dequantize(fmt: str, codes: torch.Tensor, scales: torch.Tensor,
                like: torch.Tensor) -> torch.Tensor:
    """The f32 values of quantized state (codes and per-block scales of format fmt, as optjit
    and its peers store them), laid out as `like`: each code's value times its block's scale,
    as the kernels read them (_optjit.dequantize)."""
    n = like.numel()
    flat = codes.shape != like.shape  # 4-bit codes: two to a byte, in the memory order of `like`
    values = torch.frombuffer(bytearray(_optjit.dequantize(
        fmt, (codes.flatten() if flat else _memory_order(codes)).cpu().contiguous(),
        scales.float().flatten().cpu().contiguous(), n)), dtype=torch.float32).to(codes.device)
    if flat:
        out = torch.empty_like(like, dtype=torch.float32, device=codes.device)
        _memory_order(out).copy_(values)
        return out
    # Codes of the parameter's shape hold their blocks in their own memory order (a row-major
    # checkpoint of a channels_last model's weight): their values there, then laid out as `like`.
    laid = torch.empty_like(codes, dtype=torch.float32)
    _memory_order(laid).copy_(values)
    return torch.empty_like(like, dtype=torch.float32, device=codes.device).copy_(laid)


def _is_quant_format(fmt) -> bool:
    if not isinstance(fmt, str) or fmt == "none":
        return False
    try:
        return _optjit.quant_block(fmt) > 0
    except Error:
        return False


def _complex_like(p: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """State t (the engine's real view) as torch keeps the state of complex parameter p: complex
    (a bf16 state has no complex form and stays real)."""
    if (p.is_complex() and t.dtype in (torch.float32, torch.float64, torch.float16)
            and t.dim() >= 1 and t.shape[-1] == 2 and t.shape[:-1] == p.shape):
        return torch.view_as_complex(t)
    return t


def _as_dtensor_like(local: torch.Tensor, p) -> torch.Tensor:
    """`local` (a state tensor of DTensor parameter p's local shape) as a DTensor on p's mesh
    and placements, sharing local's memory."""
    from torch.distributed.tensor import DTensor

    return DTensor.from_local(local, p.device_mesh, p.placements, run_check=False,
                              shape=p.shape, stride=p.stride())


def _as_dtensor_rows(local: torch.Tensor, p, per_row: int) -> torch.Tensor:
    """`local` (a flat state of DTensor parameter p: 4-bit codes, a quantized state's per-block
    scales) as a DTensor of shape [p.shape[0], per_row] sharded as p on dimension 0, sharing
    local's memory (viewed as [local rows, per_row]), so that torch.distributed.checkpoint
    reshards it with p's rows, for any process count."""
    from torch.distributed.tensor import DTensor

    rows = local.view(_local(p).shape[0], per_row)
    return DTensor.from_local(rows, p.device_mesh, p.placements, run_check=False,
                              shape=torch.Size([p.shape[0], per_row]), stride=(per_row, 1))


# Under FSDP2 a tensor's quantized state is quantized only where its rows (the unit FSDP2 cuts
# it in, on dimension 0) hold whole 256-element blocks (4-bit's 128 divide them): then every
# shard, for any process count, holds whole blocks of the tensor, the sharded step is the
# unsharded one, and a checkpoint's codes and scales reshard together. Other tensors (1-d ones,
# rows of other sizes) keep f32 state there, as bitsandbytes keeps small tensors'.
_BLOCK_ROWS = 256


def _rows_hold_blocks(p) -> bool:
    return p.dim() >= 2 and p.shape[0] > 0 and (p.numel() // p.shape[0]) % _BLOCK_ROWS == 0


def _is_dtensor(t) -> bool:
    # Called for every gradient of every step: no import here. No DTensor exists unless
    # torch.distributed.tensor was imported (importing it would cost ~0.4 s).
    m = sys.modules.get("torch.distributed.tensor")
    return m is not None and isinstance(t, m.DTensor)


def _flat_offset(p) -> int:
    """Where a DTensor's local shard starts in its flattened global tensor: FSDP2 shards every
    parameter on dimension 0 (Shard(0)), so the shard is one contiguous range."""
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
    if any(not isinstance(pl, Shard) or pl.dim != 0 for pl in p.placements):
        raise Error(f"a sharded step takes DTensors sharded on dimension 0 (FSDP2's Shard(0)), "
                    f"not {p.placements}")
    _, offset = compute_local_shape_and_global_offset(p.shape, p.device_mesh, p.placements)
    return int(offset[0]) * (p.numel() // p.shape[0]) if p.dim() > 0 and p.shape[0] > 0 else 0


_to_dlpack = torch.utils.dlpack.to_dlpack


class _TrackedState(dict):
    """optimizer.state[p] for a parameter an engine steps: a dict that marks `changed` (shared
    by the optimizer) when anything is put in or taken out, so a state tensor the user replaces
    (``opt.state[p]["exp_avg"] = torch.zeros_like(p)``) is the one the next step uses, as in
    torch, instead of memory the engine was given before. Pickles as a plain dict."""

    __slots__ = ("changed",)

    def __init__(self, values: Dict[str, Any], changed: List[bool]):
        super().__init__(values)
        self.changed = changed

    def _mark(self) -> None:
        self.changed[0] = True

    def __setitem__(self, key, value):
        self._mark()
        super().__setitem__(key, value)

    def __delitem__(self, key):
        self._mark()
        super().__delitem__(key)

    def __ior__(self, other):
        self._mark()
        return super().__ior__(other)

    def pop(self, *args):
        self._mark()
        return super().pop(*args)

    def popitem(self):
        self._mark()
        return super().popitem()

    def clear(self):
        self._mark()
        super().clear()

    def update(self, *args, **kwargs):
        self._mark()
        super().update(*args, **kwargs)

    def setdefault(self, key, default=None):
        if key not in self:
            self._mark()
        return super().setdefault(key, default)

    def __reduce__(self):
        return (dict, (dict(self),))


class _TrackedStates(collections.defaultdict):
    """optimizer.state itself, marking `changed` when a parameter's whole state dict is put in
    or taken out (``opt.state[p] = {...}``). Pickles as torch's defaultdict(dict)."""

    def __init__(self, values, changed: List[bool]):
        super().__init__(dict, values)
        self.changed = changed

    def __setitem__(self, key, value):
        self.changed[0] = True
        super().__setitem__(key, value)

    def __delitem__(self, key):
        self.changed[0] = True
        super().__delitem__(key)

    def pop(self, *args):
        self.changed[0] = True
        return super().pop(*args)

    def clear(self):
        self.changed[0] = True
        super().clear()

    def update(self, *args, **kwargs):
        self.changed[0] = True
        super().update(*args, **kwargs)

    def __reduce__(self):
        return (_plain_states, (list(self.items()),))


def _plain_states(items) -> collections.defaultdict:
    return collections.defaultdict(dict, items)


class _CudaArray:
    """`count` float64s at a CUDA address, as torch.as_tensor takes them without a copy."""

    def __init__(self, address: int, count: int):
        self.__cuda_array_interface__ = {"shape": (count,), "typestr": "<f8",
                                         "data": (address, False), "version": 2}


def _declarations_end(text: str) -> int:
    """Where the pipeline text's expression starts: after its `transform NAME(...) { ... }`
    declarations (and the comments and blanks around them), which the text form puts first."""
    i, n = 0, len(text)

    def skip_blanks(i: int) -> int:
        while i < n:
            if text[i].isspace():
                i += 1
            elif text[i] == "#":
                while i < n and text[i] != "\n":
                    i += 1
            else:
                break
        return i

    while True:
        i = skip_blanks(i)
        m = re.match(r"transform(?![A-Za-z0-9_])", text[i:])
        if m is None:
            return i
        depth, j = 0, i + m.end()
        while j < n:  # to the body's closing brace (comments and strings may hold braces)
            c = text[j]
            if c == "#":
                while j < n and text[j] != "\n":
                    j += 1
                continue
            if c == '"':
                j = text.find('"', j + 1)
                if j < 0:
                    return i  # unterminated: the parser says where
            elif c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        if j >= n:
            return i
        i = j + 1


def _in_front(text: str, call: str, declaration: str = "") -> str:
    """Pipeline text with `call` (a transform) chained in front of its expression, and
    `declaration` (that transform's, if custom) among its declarations."""
    k = _declarations_end(text)
    return f"{declaration}{text[:k]}chain({call}, {text[k:].strip()})"


# A clip_grad_norm_ deferred into the step (clip_grad_norm_ below): the gradients scaled by
# torch's coefficient min(max_norm / (norm + 1e-6), 1) as they are read, in front of the rest.
_DEFERRED_HYPER = "optjit_clip_coef"
# (like_grad: rounded to the gradients' dtype, bf16 or f16, as torch's _foreach_mul_ on them
# rounds; nothing for f32 and f64 ones)
_DEFERRED_DECLARATION = (f"transform optjit_deferred_clip({_DEFERRED_HYPER}=1.0) {{\n"
                         f"  grad = like_grad(grad * {_DEFERRED_HYPER})\n}}\n")
_DEFERRED_CALL = f"optjit_deferred_clip({_DEFERRED_HYPER}=1.0)"


# The engines an optimizer keeps for the sets of parameters it stepped last (a set's engine is
# made again, from the state, when it steps after being dropped).
_KEPT_ENGINES = 32

# The optjit optimizers alive, where clip_grad_norm_ looks for the one its parameters belong to.
_OPTIMIZERS: "weakref.WeakSet[Optimizer]" = weakref.WeakSet()


@atexit.register
def _release_engines() -> None:
    """At exit, the engines of the optimizers still alive (a trainer's, which a library's
    module globals hold until the interpreter tears them down) are freed while the interpreter
    is whole: freed later, nanobind reported each as leaked, with its bindings."""
    for opt in list(_OPTIMIZERS):
        opt._forget()


class _DeferredClip:
    """torch.nn.utils.clip_grad_norm_'s scaling of the gradients, which clip_grad_norm_ below
    leaves to the optimizer's next step: the parameters it clipped, their gradients and the
    gradients' versions then, and torch's coefficient min(max_norm / (norm + 1e-6), 1) as
    torch computes it (a tensor where the norm is: on a GPU, no host round trip)."""

    __slots__ = ("params", "grads", "versions", "max_norm", "total_norm", "foreach", "coef",
                 "ids")

    def __init__(self, params, grads, ids: Set[int], max_norm: float, total_norm: torch.Tensor,
                 foreach):
        self.params, self.grads, self.ids = params, grads, ids
        self.versions = [g._version for g in grads]
        self.max_norm, self.total_norm, self.foreach = max_norm, total_norm, foreach
        clip_coef = max_norm / (total_norm + 1e-6)  # (torch's _clip_grads_with_norm_)
        coef = torch.clamp(clip_coef, max=1.0)
        # DTensor gradients (FSDP2): the norm is replicated, and torch scales each local shard
        # by its local value, as the step will.
        self.coef = coef.full_tensor() if _is_dtensor(coef) else coef

    def applies(self, opt: "Optimizer") -> bool:
        """True: the gradients are the ones clipped, unchanged. False: every one was dropped
        since (zeroed to None, a new backward made new ones), and the clip with them. A
        gradient changed in place (accumulated, modified) or some kept and others replaced is
        an error: the step cannot apply the clip to what was clipped."""
        kept = [p.grad is g for p, g in zip(self.params, self.grads)]
        if not any(kept):
            return False
        if all(kept) and [g._version for g in self.grads] == self.versions:
            return True
        for p, g, v, k in zip(self.params, self.grads, self.versions, kept):
            if not k or g._version != v:
                index = next((i for i, q in enumerate(opt._params()) if q is p), None)
                how = ("was changed in place" if k else
                       "was replaced while other clipped gradients were kept")
                raise Error(
                    f"the gradient of parameter {index} {how} after clip_grad_norm_, which "
                    f"optjit defers into the optimizer's step (optjit.torch.clip_grad_norm_, "
                    f"or torch's after an install()): the clip's scaling cannot be applied to "
                    f"what was clipped any more. "
                    f"Clip right before step(), drop a clip with optimizer.zero_grad(), or "
                    f"install(defer_clip=False) to clip as torch does")
        return True

    def covers(self, ids: List[int]) -> bool:
        """Whether the step's parameters with gradients are exactly the clipped ones."""
        return len(ids) == len(self.ids) and self.ids.issuperset(ids)

    def scale_gradients(self) -> None:
        """torch's own scaling, in place, as clip_grad_norm_ would have done it."""
        torch.nn.utils.clip_grads_with_norm_(self.params, self.max_norm, self.total_norm,
                                             self.foreach)


_torch_clip_grad_norm_ = torch.nn.utils.clip_grad_norm_
_step_hook = None  # torch's global step pre-hook, once a clip was deferred


def _before_any_step(optimizer, args, kwargs) -> None:
    """Before any optimizer's step (torch's global pre-hook): where another optimizer than the
    one a clip was deferred to steps clipped parameters, their gradients are scaled as torch's
    clip did, first."""
    for opt in list(_OPTIMIZERS):
        clip = opt._clip
        if clip is None or opt is optimizer:
            continue
        if any(id(q) in clip.ids for g in optimizer.param_groups for q in g["params"]):
            taken = opt._take_clip()
            if taken is not None:
                taken.scale_gradients()


def _clip_owner(params: List[torch.Tensor], grads: List[torch.Tensor],
                ids: Set[int]) -> Optional["Optimizer"]:
    """The optjit optimizer whose step can scale these parameters' gradients: the one
    optimizer alive that holds them all, where the gradients are dense floating-point tensors
    of one dtype on one device (bf16 and f16 ones are rounded to their dtype after the
    scaling, in the step, as torch's scaling rounds them)."""
    if not params or not hasattr(torch.nn.utils, "get_total_norm"):
        return None
    if len(ids) != len(params):
        return None  # (a parameter listed twice: torch scales its gradient twice)
    g0 = grads[0]
    sharded = _is_dtensor(g0)  # FSDP2's: all DTensors (scaled as their local shards) or none
    dtype, device, plain = g0.dtype, g0.device, torch.Tensor
    if dtype not in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
        return None
    for g in grads:
        # (a plain tensor's type is checked first: isinstance against DTensor costs a
        # microsecond a gradient once DTensor is imported)
        if (g.dtype != dtype or g.layout != torch.strided or g.device != device or
                (sharded if type(g) is plain else _is_dtensor(g) != sharded)):
            return None
    owners = [opt for opt in list(_OPTIMIZERS)
              if set(map(id, opt._params())).issuperset(ids)]
    return owners[0] if len(owners) == 1 else None


@torch.no_grad()
def clip_grad_norm_(parameters, max_norm: float, norm_type: float = 2.0,
                    error_if_nonfinite: bool = False, foreach: Optional[bool] = None):
    """``torch.nn.utils.clip_grad_norm_``, with the gradients' scaling left to the optjit
    optimizer that steps them next, inside its fused step, instead of a pass over them of its
    own (a read and a write of every gradient)::

        norm = optjit.torch.clip_grad_norm_(model.parameters(), 1.0)   # torch's norm, now
        opt.step()                                                     # scales as it reads

    ``install()`` puts it in place of torch's (``defer_clip=True``), for a library that clips
    (transformers' Trainer, through accelerate). The norm is torch's own, returned as torch
    returns it, and the step scales by torch's coefficient: the same parameters, bit for bit,
    as torch's clip followed by the step. The gradients themselves stay unscaled: code that
    reads them between the clip and the step sees them so. Code that changes them there (in
    place) gets an error at the step; ``optimizer.zero_grad()`` drops the clip with them.

    FSDP2's DTensor gradients are deferred too: torch's norm is replicated over the mesh, and
    each process's step scales its local shards by it, as torch's clip does.

    Clipped as torch does, at once: gradients of parameters that no single optjit optimizer
    holds, of dtypes other than float32, float64, bfloat16 and float16, on several devices,
    sparse ones, and DTensors beside plain tensors. Where the step's parameters with gradients
    are not exactly the clipped ones, the step scales them with torch first."""
    if isinstance(parameters, torch.Tensor):
        parameters = [parameters]
    elif isinstance(parameters, types.GeneratorType):
        listed = list(parameters)
        if not listed:  # (torch warns of an empty generator)
            return _torch_clip_grad_norm_((p for p in listed), max_norm, norm_type,
                                          error_if_nonfinite, foreach)
        parameters = listed
    else:
        parameters = list(parameters)
    clipped = [p for p in parameters if p.grad is not None]
    grads = [p.grad for p in clipped]
    ids = set(map(id, clipped))
    owner = _clip_owner(clipped, grads, ids)
    if owner is None:
        return _torch_clip_grad_norm_(parameters, max_norm, norm_type, error_if_nonfinite,
                                      foreach)
    pending = owner._take_clip()
    if pending is not None:  # clipped twice: the first clip's scaling is what this one sees
        pending.scale_gradients()
    total_norm = torch.nn.utils.get_total_norm(grads, norm_type, error_if_nonfinite, foreach)
    owner._clip = _DeferredClip(clipped, grads, ids, float(max_norm), total_norm, foreach)
    global _step_hook
    if _step_hook is None:
        from torch.optim.optimizer import register_optimizer_step_pre_hook
        _step_hook = register_optimizer_step_pre_hook(_before_any_step)
    return total_norm


class _Engine:
    """One optjit engine over a fixed set of tensors (same device, same step count)."""

    def __init__(self, opt: "Optimizer", members: List[Tuple[int, int, torch.Tensor]],
                 pipeline: Optional[str] = None):
        self.members = members  # (group index, parameter index, parameter)
        self.opt = weakref.ref(opt)  # (it holds the engines)
        self.dense: Dict[int, torch.Tensor] = {}  # per member: its sparse gradient, densified
        params = [p for _, _, p in members]
        device = params[0].device
        queue = 0
        backend = opt._backend
        self.stream = None  # CUDA: the stream the engine queues its steps on
        # CUDA under a GradScaler: a step is queued without waiting to learn whether it was
        # skipped; the device counts it, in step tensors on the GPU (as torch's fused optimizers
        # keep them), and the scale is read from the scaler's own tensor.
        self.device_counts = device.type == "cuda" and opt._scaled
        self.skip_flag = None  # the engine's skip flag (1.0 if its last step skipped), on the GPU
        self.scale64 = None  # the scale, as the engine reads it (float64, on the GPU)
        self.clip64 = None  # a deferred clip's coefficient, as the engine reads it (GPU)
        # CUDA: scalar states (NAdam's mu_product) are copied on the stream from where the
        # device step keeps them, by (group, name): (address, a tensor there); None: the host
        # step keeps them (read after it, which waited anyway).
        self.scalar_sources: Optional[Dict[Tuple[int, str], Tuple[int, torch.Tensor]]] = {}
        if device.type == "cuda":
            self.stream = torch.cuda.current_stream(device)
            # torch's default stream is the legacy one, handle 0, which to optjit would mean
            # "a stream of your own" (unordered with torch's work): it is named as
            # CU_STREAM_LEGACY.
            queue = self.stream.cuda_stream or _optjit.CU_STREAM_LEGACY
            backend = "cuda"
        elif device.type != "cpu":
            raise Error(f"optjit steps CPU and CUDA tensors, not {device.type} ones")
        elif backend == "auto":
            backend = "cpu"
        names, shard = opt._shard_spec(members)
        # The arrays the engine steps, kept alive here: the engine holds their addresses, and
        # a parameter whose .data the framework replaces must not be freed under it.
        for _, i, p in members:
            if p.dtype not in _STEPPED_DTYPES:
                raise Error(f"parameter {i} is {p.dtype}: optjit steps float32, float64, float16 "
                            f"and bfloat16 tensors (complex ones as their real views)")
        self.complex = any(p.is_complex() for p in params)
        if self.complex:
            self._check_complex(opt, params)
        self.arrays = [_array(p).detach() for p in params]
        quantize = [opt._state_quantized(p, opt.param_groups[g]) for g, _, p in members]
        self.engine = _optjit.Engine(
            pipeline or opt._pipeline,
            names,
            self.arrays,
            group_of=[g for g, _, _ in members],
            groups=len(opt.param_groups),
            backend=backend,
            device=device.index if device.index is not None else -1,
            queue=queue,
            cache=opt._cache,
            device_step=opt._device_step,
            cuda_graph=opt._cuda_graph,
            param_rounding=opt._param_rounding,
            shard=shard,
            quantize=quantize,
        )
        self.params = params
        self.dtensors = any(_is_dtensor(p) for p in params)  # FSDP2's: their local shards
        self.data_ptrs = [_local(p).data_ptr() for p in params]
        self.sent: Dict[Tuple[int, str], List[float]] = {}
        # Short hyperparameter names ("lr", "betas") as torch's param_groups name them.
        # A program-wide one ("state_seed" of state_format="bf16_sr") keeps its whole name.
        self.hypers = sorted({h.split(".")[1] if "." in h else h
                              for h in self.engine.hyperparameters})
        # Each one's number of values ("betas": 2), the most any transform of the chain takes.
        per = collections.Counter(tuple(h.split(".")[:2]) for h in self.engine.hyperparameters)
        self.hyper_sizes = {name: max(c for key, c in per.items() if key[-1] == name)
                            for name in self.hypers}
        # The state tensors bound to the engine, by (member, buffer): kept alive, as it holds
        # their addresses; a tensor at another address is bound afresh.
        self.state_arrays: Dict[Tuple[int, str], torch.Tensor] = {}
        # Whether the engine steps copies of the state on its device (opencl, webgpu over CPU
        # tensors). The torch tensors in optimizer.state are what counts between steps, as in
        # torch: each step gives them the device's values (sync_state), and the device takes
        # theirs again where the user changed one in place (its version moved) and whenever
        # the engine binds (another engine may have stepped them since this one last did).
        self.keeps_state = self.engine.backend in ("opencl", "webgpu")
        # With keeps_state, each state tensor's version (torch's count of in-place changes)
        # when the engine last gave it its values: another means the user changed it since.
        self.versions: Dict[Tuple[int, str], int] = {}
        self.fresh = True  # its state is not yet initialized from the groups' hyperparameters
        self.warned_layout: set = set()  # members whose gradient's layout was warned of

    def _bind_state(self, k: int, name: str, t: torch.Tensor, adopt: bool) -> None:
        flat = t.detach() if t.shape == self.arrays[k].shape else t.detach().view(-1)
        # (a DLPack capsule: a fifth of __dlpack__'s cost, paid per state tensor)
        self.engine.bind_state(k, name, _to_dlpack(flat), adopt=adopt)
        self.state_arrays[(k, name)] = t  # (kept alive: the engine writes it)
        self.versions[(k, name)] = t._version

    def bind(self, opt: "Optimizer") -> None:
        """The state tensors in optimizer.state[p], created (with optjit's initial values) where
        torch has none yet, adopted where it has them (a loaded checkpoint). The step count and
        the scalar states stay one tensor per parameter, as torch keeps them (a checkpoint
        loads into torch's optimizer): each a view of one element of a tensor per engine (per
        group for a scalar state), so a step updates them all with one operation."""
        self.check_params()  # first: a parameter that changed shape is the error to report
        if self.fresh:
            # State that starts here starts from the groups' hyperparameters as they are now (a
            # warmup scheduler's lr, a group's own lr: Rprop's step sizes, ASGD's eta), as
            # torch's optimizer makes it at its first step.
            self.sync_hypers(opt._hyper_groups())
            self.engine.initialize_state()
            self.fresh = False
        step = None
        self.scalars: Dict[Tuple[int, str], torch.Tensor] = {}
        scalar_members: Dict[Tuple[int, str], List[int]] = {}

        for k, (g, i, p) in enumerate(self.members):
            st = opt._tracked_state(p)
            # torch's SGD keeps no step count; a state it left has taken at least one step.
            present = [name for name in self.engine.state_buffers
                       if isinstance(st.get(name), torch.Tensor)]
            had = bool(present)
            # A state that has some of the buffers but not others is a damaged checkpoint (torch
            # fails on it too); starting the missing ones afresh would silently change the run.
            # (A quantized buffer's scales come with its values when they are converted; codes
            # without their scales are damage: they would be read as zeros.)
            def converted(name):
                codes = name[:-len(".absmax")] if name.endswith(".absmax") else None
                return codes in present and st[codes].dtype != torch.uint8

            missing = [name for name in self.engine.state_buffers
                       if name not in present and not converted(name)]
            if had and missing:
                odd = [f"{name} is {type(st[name]).__name__}" for name in missing if name in st]
                raise Error(f"optimizer.state of parameter {i} has {', '.join(present)} but not "
                            f"{', '.join(missing)}" + (f" as a tensor ({'; '.join(odd)})"
                                                        if odd else "")
                            + ": a damaged or mismatched checkpoint, or an option that needs "
                            "it (amsgrad, centered, RMSprop's momentum) set after the state was "
                            "made, where torch's step fails too")
            foreign = [k for k, v in st.items() if isinstance(v, torch.Tensor) and v.dim() > 0
                       and k not in self.engine.scalar_states]
            if not had and missing and foreign:
                # Another optimizer's state: starting this one's afresh would silently restart
                # the run (its step count kept).
                raise Error(f"optimizer.state of parameter {i} has {', '.join(foreign)} but "
                            f"none of {', '.join(missing)}: a checkpoint of another optimizer")
            lp = _array(p)
            for name in present:
                self._codes_to_values(opt, k, i, p, lp, name, st)
            for name in self.engine.state_buffers:
                rows = self._state_rows(k, p, name)
                t, adopt = self._state_tensor(k, i, p, name, st, rows)
                held = self.state_arrays.get((k, name))
                # (An engine that keeps copies takes the values anew: other engines may have
                # stepped these parameters since it last did.)
                if held is None or held.data_ptr() != t.data_ptr() or self.keeps_state:
                    self._bind_state(k, name, t, adopt)
                if (self.engine.state_storage(k, name) == "u8" and not self.dtensors
                        and t.shape != lp.shape):
                    # Flat codes (4-bit) hold no layout of their own: the parameter's memory
                    # order they are in, for the next engine and for state_dict().
                    opt._code_orders[(id(p), name)] = list(lp.stride())
                if (self.dtensors and _is_dtensor(p) and st[name] is t
                        and (rows or t.shape == _local(p).shape)):
                    # FSDP2: the state is a DTensor laid out as its parameter (as torch's
                    # optimizers make it), or for a flat one (scales, 4-bit codes) as p's rows,
                    # so torch.distributed.checkpoint saves and reshards it; the engine steps
                    # its local shard, `t`. (An unquantized tensor's scales are empty.)
                    st[name] = (_as_dtensor_rows(t, p, rows) if rows
                                else _as_dtensor_like(t, p))
            # (A state that starts here gets its "step" below: a view of the engine's counts.)
            s = _step_count(st["step"], i) if "step" in st else 1 if had else 0
            step = s if step is None else step
            for name in self.engine.scalar_states:
                first = (g, name) not in scalar_members
                if name in st and first:
                    value = _number_of(st[name], f"optimizer.state[p]['{name}'] of parameter {i}")
                    self.engine.set_scalar_state(name, value, group=g)
                scalar_members.setdefault((g, name), []).append(k)
        self.engine.set_step_count(step or 0)
        # Under a GradScaler on a GPU the step counts live there (the device counts the steps).
        where = self.members[0][2].device if self.device_counts else torch.device("cpu")
        where_scalars = torch.device("cpu") if self.stream is None else self.stream.device
        self.counts = torch.full((len(self.members),), float(step or 0), dtype=_scalar_dtype(),
                                 device=where)
        for k, (_, _, p) in enumerate(self.members):
            opt.state[p]["step"] = self.counts[k]
        for (g, name), ks in scalar_members.items():
            # On the GPU beside the parameters, as torch's capturable optimizers keep them (a
            # checkpoint loads into torch's either way: torch casts them to the parameter's
            # dtype). In float64, as the engine keeps them, so that a checkpoint continues bit
            # for bit (in float32, Prodigy's d lost its 8th digit at every save and load).
            t = torch.full((len(ks),), self.engine.scalar_state(name, group=g),
                           dtype=torch.float64, device=where_scalars)
            for j, k in enumerate(ks):
                opt.state[self.members[k][2]][name] = t[j]
            self.scalars[(g, name)] = t
        self.marks = self._marks()

    def _marks(self) -> Tuple[int, ...]:
        """The versions (torch's count of in-place changes) of the step counts and scalar
        states optimizer.state shows, which the engine keeps its own copies of."""
        return (self.counts._version, *(t._version for t in self.scalars.values()))

    def changed_in_place(self) -> bool:
        """Whether a step count or scalar state was changed in place since the engine last set
        them (``state["step"].fill_(0)`` to restart Adam's bias correction): torch's next step
        reads it, so the engine must take it (it kept stepping its own count)."""
        if self.counts._version != self.marks[0]:
            return True
        return bool(self.scalars) and self._marks() != self.marks

    def _codes_to_values(self, opt: "Optimizer", k: int, i: int, p: torch.Tensor,
                         lp: torch.Tensor, name: str, st: Dict[str, Any]) -> None:
        """Quantized codes in optimizer.state[p][name] that this engine cannot step as they are,
        replaced by their f32 values, which the state's own format then takes: codes of another
        format than the state keeps (bitsandbytes', torchao's, another state_format), and codes
        in another memory order than the parameter's. Blocks are elements as they lie in
        memory: codes of the parameter's shape carry their order in their strides; flat ones
        (4-bit) were stepped in the order recorded in opt._code_orders (or saved as
        "exp_avg.strides"), else the parameter's (a model moved to channels_last, a checkpoint
        of the model in another memory_format)."""
        fmt = opt._code_maps.pop((id(p), name), None) if opt._code_maps else None
        codes = st.get(name)  # (scales go with their codes, which may have taken them)
        if not isinstance(codes, torch.Tensor) or codes.dtype != torch.uint8:
            return
        if fmt is None and self.engine.state_storage(k, name) == "u8":
            fmt = self.engine.state_quant(name)  # this optimizer's own codes
        if fmt is None:
            return
        flat = codes.shape != lp.shape
        order = opt._code_orders.get((id(p), name)) if flat else None
        if order is not None and not _dense_strides(lp.shape, order):
            raise Error(f"the state dict's {name}.strides of parameter {i} are {order}, which "
                        f"do not lay out its shape {list(lp.shape)} densely: a checkpoint of "
                        f"another model")
        laid = (torch.empty_strided(lp.shape, order, dtype=torch.float32, device=lp.device)
                if order is not None else codes if not flat else lp)
        moved = not _same_layout(laid, lp)
        if moved and self.dtensors:
            raise Error(f"parameter {i}'s local shard is laid out otherwise than when its "
                        f"quantized state was made; optjit does not move quantized state of "
                        f"DTensors between memory orders")
        if moved or fmt != self.engine.state_quant(name) or (
                self.engine.state_storage(k, name) != "u8"):
            st[name] = _dequantize(fmt, codes, st.pop(name + ".absmax"), laid if flat else lp)
            opt._code_orders.pop((id(p), name), None)

    def _state_tensor(self, k: int, i: int, p: torch.Tensor, name: str, st: Dict[str, Any],
                      rows: Optional[int]) -> Tuple[torch.Tensor, bool]:
        """State `name` of member k (parameter i) as the engine keeps it (`rows`: its elements
        per row where it is kept by rows, _state_rows), and whether it holds
        values to adopt: torch's (or a checkpoint's) tensor, converted to the engine's format
        where that loses nothing it had, else a new one the engine initializes."""
        t = st.get(name)
        if _is_dtensor(t):  # a DTensor parameter's state: its local shard is what is stepped
            t = t.to_local()
        if (isinstance(t, torch.Tensor) and type(t) not in (torch.Tensor, torch.nn.Parameter)
                and not _is_dtensor(t)):
            # A tensor subclass put in the state (load_state_dict takes torchao's apart): its
            # values, which this state's format then takes.
            if hasattr(t, "dequantize"):
                t = t.dequantize()
            else:
                raise Error(f"optimizer.state[p]['{name}'] of parameter {i} is a "
                            f"{type(t).__name__}, which optjit cannot read as values")
            st[name] = _complex_like(p, t)
        if isinstance(t, torch.Tensor) and t.is_complex():  # (as the engine steps it)
            t = torch.view_as_real(t)
        # The state's own format (state_format=), which may not be the parameter's.
        want = _TORCH_DTYPES[self.engine.state_storage(k, name)]
        # A quantized state's scales ("exp_avg.absmax") hold one value per block.
        n = self.engine.state_elements(k, name)
        lp = _array(p)
        shape = (lp.shape if rows is None and n == lp.numel() else
                 torch.Size([n]) if rows is None else torch.Size([lp.shape[0], rows]))

        def new(dtype, device=p.device):
            # A state of the parameter's shape is laid out as the parameter (channels_last
            # too: the step pairs their elements in memory order); any other is flat.
            if shape == lp.shape:
                return torch.empty_like(lp, dtype=dtype, device=device)
            return torch.empty(shape, dtype=dtype, device=device)

        if not isinstance(t, torch.Tensor):
            t = new(want)
            st[name] = _complex_like(p, t)
            return t, False
        if t.is_floating_point() and want == torch.uint8 and t.shape == lp.shape:
            # Values (a checkpoint of torch's optimizer, or of f32 state) into 8-bit state:
            # quantized here as the cpu backend would store them, in the parameter's memory
            # order (blocks of 256 elements as the step meets them).
            values = torch.empty_like(lp, dtype=torch.float32, device="cpu").copy_(t.detach())
            fmt = self.engine.state_quant(name)
            # An unsigned map (q8u, q4u) holds no negative value, and optjit proved this state
            # never negative: one here is not this optimizer's state (quantized, it would be 0).
            negative = (values.flatten() < 0).nonzero() if _optjit.quant_unsigned(fmt) else []
            if len(negative):
                k = int(negative[0])
                raise Error(f"optimizer.state[p]['{name}'] of parameter {i} is "
                            f"{values.flatten()[k].item()} at element {k}, and this optimizer "
                            f"keeps it as {fmt}, which holds only values >= 0: the state dict "
                            f"does not hold this optimizer's state (it is never negative)")
            codes, scales = _optjit.quantize(fmt, _memory_order(values))
            c = new(torch.uint8, "cpu")
            _memory_order(c).copy_(torch.frombuffer(bytearray(codes), dtype=torch.uint8))
            st[name] = t = c.to(p.device)
            st[name + ".absmax"] = torch.frombuffer(
                bytearray(scales), dtype=torch.float32).to(p.device)
        where = f"optimizer.state[p]['{name}'] of parameter {i}"
        if t.dtype == torch.uint8 and want != torch.uint8:
            raise Error(f"{where} holds quantized codes (a checkpoint of 8-bit, 4-bit or fp8 "
                        f"state), but this optimizer keeps it as {_DTYPE_NAMES[want]}: load the "
                        f"checkpoint with the state_format it was saved with")
        if t.shape != shape and shape != lp.shape and t.numel() == shape.numel():
            # A flat state (scales, 4-bit codes) saved by rows (FSDP2's layout) or flat.
            t = t.reshape(shape)
            st[name] = _complex_like(p, t)
        if t.shape != shape:
            raise Error(f"{where} has shape {list(t.shape)}, but this optimizer keeps "
                        f"{list(shape)} for it (parameter shape {list(lp.shape)}): a checkpoint "
                        f"of another model or state_format")
        if want == torch.uint8 and t.dtype != torch.uint8:
            raise Error(f"{where} is {t.dtype}, not the uint8 codes of a quantized state")
        laid_out = (_same_layout(t, lp) if shape == lp.shape else t.is_contiguous())
        if t.dtype != want or t.device != p.device or not laid_out:
            # A checkpoint's values in another format (torch's load_state_dict casts state to
            # the parameter's dtype), place or memory order: kept, converted. (Codes in another
            # memory order were taken as their values by _codes_to_values.)
            t = new(want).copy_(t)
            st[name] = _complex_like(p, t)
        return t, True

    def _state_rows(self, k: int, p: torch.Tensor, name: str) -> Optional[int]:
        """Elements per row of p's flat state `name` (a quantized state's scales, 4-bit codes)
        when p is a DTensor whose state is kept by rows (_as_dtensor_rows); else None."""
        if not self.dtensors or not _is_dtensor(p) or not _rows_hold_blocks(p):
            return None
        codes = name[:-len(".absmax")] if name.endswith(".absmax") else name
        if self.engine.state_storage(k, codes) != "u8":  # (decided by the whole tensor)
            return None
        row = p.numel() // p.shape[0]
        code_bytes, scales = _optjit.quant_sizes(self.engine.state_quant(codes), row)
        if name.endswith(".absmax"):
            return scales
        return None if code_bytes == row else code_bytes  # 8-bit codes keep p's shape

    def _moved(self) -> Optional[Tuple[List[int], List[int]]]:
        """The parameters' addresses now and the members whose memory the framework replaced
        (reallocated, or swapped: a.data, b.data = b.data, a.data); None if none was."""
        if self.dtensors:
            now = [_local(p).data_ptr() for _, _, p in self.members]
        else:
            now = [p.data_ptr() for p in self.params]
        if now == self.data_ptrs:
            return None
        return now, [k for k in range(len(now)) if now[k] != self.data_ptrs[k]]

    def relaid(self, moved: Optional[Tuple[List[int], List[int]]] = None) -> bool:
        """Whether a parameter's memory was replaced by memory laid out otherwise
        (``model.to(memory_format=torch.channels_last)`` after a step): the engine pairs
        state and parameter in memory order, so a new engine must adopt the state."""
        moved = moved or self._moved()
        if moved is None:
            return False
        arrays = [(self.array_of(self.members[k][2]), self.arrays[k]) for k in moved[1]]
        # (A new shape is the rebind's error to report: "a new shape needs a new optimizer".)
        return any(a.shape == b.shape and not _same_layout(a, b) for a, b in arrays)

    def check_params(self) -> bool:
        """Rebinds the parameters whose memory was replaced, all together, as they are now;
        False (nothing rebound) where one is now laid out otherwise: a new engine is needed."""
        moved = self._moved()
        if moved is None:
            return True
        if self.relaid(moved):
            return False
        now, ks = moved
        arrays = [self.array_of(self.members[k][2]).detach() for k in ks]
        self.engine.rebind_params([(k, _to_dlpack(a)) for k, a in zip(ks, arrays)])
        for k, a in zip(ks, arrays):
            self.arrays[k] = a
        self.data_ptrs = now
        return True

    def array_of(self, p: torch.Tensor) -> torch.Tensor:
        """_array(p), without asking each parameter whether it is a DTensor where none is
        (isinstance against DTensor costs microseconds per parameter once it is imported)."""
        return _array(p) if self.dtensors or self.complex else p

    def sync_hypers(self, groups: List[Dict[str, Any]]) -> None:
        """Whatever the param groups hold now (a scheduler's lr) is what the next step uses."""
        present = {g for g, _, _ in self.members}
        for g in present:
            for name in self.hypers:
                if name not in groups[g]:
                    continue
                try:
                    v = _values(groups[g][name])
                except (TypeError, ValueError, RuntimeError):
                    _number_of(groups[g][name], f"param_groups[{g}]['{name}']")  # names it
                    raise
                if self.sent.get((g, name)) != v:
                    if len(v) != self.hyper_sizes[name]:  # (torch would fail to unpack it)
                        raise Error(f"param_groups[{g}]['{name}'] has {len(v)} value(s); "
                                    f"'{name}' takes {self.hyper_sizes[name]}")
                    self.engine.set_hyper(name, v, group=g)
                    self.sent[(g, name)] = v

    def set_scale(self, scale) -> None:
        """A GradScaler's scale for the next step (None: its grads are already unscaled)."""
        if not self.device_counts:
            self.set("scale", [float(scale) if scale is not None else 1.0])
            return
        self._on_device("scale64", "scale", scale)

    def set_clip_coef(self, coef: Optional[torch.Tensor]) -> None:
        """A deferred clip_grad_norm_'s coefficient for the next step (None: 1, no clip)."""
        if self.stream is None:
            self.set(_DEFERRED_HYPER, [float(coef) if coef is not None else 1.0])
            return
        self._on_device("clip64", _DEFERRED_HYPER, coef)

    def _on_device(self, attr: str, name: str, value) -> None:
        """Hyperparameter `name` for the next step, which the engine reads from one float64 on
        the GPU (kept in self.<attr>): a tensor's value is copied on the stream, with no host
        round trip; None is 1."""
        source = getattr(self, attr)
        if source is None:
            source = torch.ones((), dtype=torch.float64, device=self.stream.device)
            setattr(self, attr, source)
            self.engine.set_hyper_source(name, source)
        if value is None:
            source.fill_(1.0)
        elif isinstance(value, torch.Tensor):
            source.copy_(value.detach().reshape(()))
        else:
            source.fill_(float(value))

    @staticmethod
    def _check_complex(opt: "Optimizer", params: List[torch.Tensor]) -> None:
        """Complex parameters step as their real views, which is torch's complex step for every
        built-in and for the 2-norm clip (the norm of the pairs is the norm of the moduli);
        other norms would differ (torch takes each element's modulus)."""
        if any(_is_dtensor(p) for p in params):
            raise Error("complex DTensor parameters are not supported (FSDP2 shards them as "
                        "complex; step their real views)")
        args = getattr(opt, "_pipeline_args", None)
        if args is not None and args[1] is not None and float(args[2]) != 2.0:
            raise Error(f"complex parameters with max_grad_norm take norm_type=2 only (the "
                        f"{args[2]}-norm of complex numbers takes their moduli; optjit steps "
                        f"their real and imaginary parts)")

    def densify(self, k: int, g: torch.Tensor) -> torch.Tensor:
        """Member k's sparse gradient (nn.Embedding(sparse=True)) as a dense one, in a buffer
        kept for it: SGD and Adagrad, which torch steps sparse gradients with, give the same
        results for the dense gradient (their update of an element whose gradient is zero
        is the sparse update's: nothing, or the momentum torch's sparse buffer carries too)."""
        opt = self.opt()
        g_index, i, p = self.members[k]
        if not opt._sparse_grads:
            raise Error(f"parameter {i} has a sparse gradient, which {type(opt).__name__} does "
                        f"not step (as torch's; torch.optim.SGD and Adagrad do, and so do "
                        f"optjit's)")
        if opt.param_groups[g_index].get("weight_decay", 0) != 0:
            raise Error(f"parameter {i} has a sparse gradient, which {type(opt).__name__} steps "
                        f"only without weight_decay (as torch's)")
        buf = self.dense.get(k)
        if buf is None:
            buf = self.dense[k] = torch.zeros_like(_local(p), dtype=g.dtype)
        else:
            buf.zero_()
        buf.add_(g)
        return torch.view_as_real(buf) if buf.is_complex() else buf

    def set(self, name: str, values: List[float]) -> None:
        """A hyperparameter that no param group holds (a GradScaler's scale)."""
        if self.sent.get((-1, name)) != values:
            self.engine.set_hyper(name, values)
            self.sent[(-1, name)] = values

    def step(self, grads: Optional[List[torch.Tensor]] = None) -> bool:
        """One step; `grads`: the members' gradients in order, if the caller has them."""
        # The gradients as DLPack capsules (to_dlpack, a C function: a fifth of __dlpack__'s
        # cost per tensor); the streams are ordered below, as the protocol's stream would.
        if grads is None:
            grads = [p.grad for p in self.params]
        if self.dtensors:
            grads = [_local(g) for g in grads]
        if self.complex:
            grads = [torch.view_as_real(g) if g.is_complex() and not g.is_sparse else g
                     for g in grads]
        tensors = grads
        if self.keeps_state:
            # The state as the user left it: one changed in place since the last step goes to
            # the device again (torch's optimizers read what optimizer.state holds).
            for key, t in self.state_arrays.items():
                if t._version != self.versions.get(key):
                    self._bind_state(*key, t, True)
        try:
            grads = [_to_dlpack(g) for g in grads]  # (one that requires grad is read as it is)
        except RuntimeError:  # a sparse gradient has no DLPack form
            if not any(g.is_sparse for g in grads):
                raise
            tensors = [self.densify(k, g) if g.is_sparse else g for k, g in enumerate(grads)]
            grads = [_to_dlpack(g) for g in tensors]
        try:
            skipped = self._step_on_stream(grads)
        except Error:
            # The engine checks every gradient before it steps anything. One laid out unlike
            # its parameter (set by hand: a transposed or expanded tensor; autograd gives a
            # gradient its parameter's layout) is copied into that layout, as torch's for-loop
            # step reads any layout; anything else is the error.
            conformed = self.conformed(tensors)
            if conformed is None:
                raise
            skipped = self._step_on_stream([_to_dlpack(g) for g in conformed])
        if self.keeps_state:
            # optimizer.state as torch's optimizers leave it after a step, for whoever reads it
            # (it held the values of before the steps the device kept to itself).
            self.engine.sync_state()
            self.versions = {key: t._version for key, t in self.state_arrays.items()}
        if skipped is None:  # queued, and it may have been skipped: the device counts it
            if self.skip_flag is None:
                self.skip_flag = torch.as_tensor(_CudaArray(self.engine.skip_flag(), 1),
                                                 device=self.stream.device)
            self.counts.add_(1.0 - self.skip_flag[0])
        elif skipped:
            return True
        else:
            self.counts.add_(1.0)
        for (g, name), t in self.scalars.items():  # NAdam, ASGD
            src = self.scalar_source(g, name)
            if src is not None:
                t.copy_(src.expand_as(t))  # on the stream, after the step
            else:
                t.fill_(self.engine.scalar_state(name, group=g))
        self.marks = self._marks()
        return False

    def _step_on_stream(self, grads: List[Any]) -> Optional[bool]:
        now = None if self.stream is None else torch.cuda.current_stream(self.stream.device)
        if now is not None and now.cuda_stream != self.stream.cuda_stream:
            # Stepped under another current stream than the engine's: the step waits for what
            # that stream queued (the gradients), and what it queues next waits for the step.
            self.stream.wait_stream(now)
            with torch.cuda.stream(self.stream):  # what torch queues from inside the step
                skipped = self.engine.step(grads)
            now.wait_stream(self.stream)
            return skipped
        # On the current stream a step returns once queued, as torch's own operations do.
        return self.engine.step(grads)

    def conformed(self, grads: List[torch.Tensor]) -> Optional[List[torch.Tensor]]:
        """The gradients with each one laid out unlike its parameter copied into the
        parameter's layout (warned once per parameter), or None where all have its layout."""
        out, changed = list(grads), False
        for k, g in enumerate(grads):
            a = self.arrays[k]
            if (not isinstance(g, torch.Tensor) or g.is_sparse or g.shape != a.shape
                    or g.dtype != a.dtype or g.device != a.device or _same_layout(g, a)):
                continue
            if k not in self.warned_layout:
                self.warned_layout.add(k)
                warnings.warn(f"optjit: the gradient of parameter {self.members[k][1]} is laid "
                              f"out unlike its parameter (strides {tuple(g.stride())} against "
                              f"{tuple(a.stride())}): it is copied into the parameter's layout "
                              f"before each step", stacklevel=4)
            out[k] = torch.empty_like(a).copy_(g)
            changed = True
        return out if changed else None

    def scalar_source(self, g: int, name: str) -> Optional[torch.Tensor]:
        """Scalar state `name` of group g where the device step keeps it (a float64 tensor on
        the GPU), or None where the host keeps it."""
        if self.stream is None or self.scalar_sources is None:
            return None
        try:
            address = self.engine.scalar_state_address(name, g)
        except Error:  # a host step (mixed dtypes, device_step=False): the host has them
            self.scalar_sources = None
            return None
        known = self.scalar_sources.get((g, name))
        if known is None or known[0] != address:  # (a rebuilt executor moves its control block)
            known = (address, torch.as_tensor(_CudaArray(address, 1), device=self.stream.device))
            self.scalar_sources[(g, name)] = known
        return known[1]


def _one_at_a_time(method: Callable) -> Callable:
    """The method holding the optimizer's lock: steps (their engines release the GIL), state
    dicts and new groups from several threads run one after another. Unserialized, a second
    thread's first step bound state the first was still making ("has exp_avg but not
    exp_avg_sq: a damaged ... checkpoint") and steps were lost."""
    @functools.wraps(method)
    def locked(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)
    return locked


class Optimizer(torch.optim.Optimizer):
    """A ``torch.optim.Optimizer`` that steps an optjit pipeline.

    With ``torch.amp.GradScaler``, unscaling and the found-inf skip happen inside the fused step
    (``_step_supports_amp_scaling``, as torch's fused optimizers): the scaler hands the step its
    scale, the pipeline gains a ``grad_scaler`` in front, and a step with Inf/NaN gradients
    leaves parameters, state and step counts bit-identical.

    ``pipeline`` is optjit's pipeline text (``optjit list`` shows the built-ins; custom
    transforms are declared in the same text), or a file that holds it (a str or an
    ``os.PathLike``; read once, here). ``defaults`` are the hyperparameters param
    groups may set, by torch's names (``lr``, ``betas``, ``weight_decay``, ...); whatever a group
    or a scheduler sets is read at the next step. ``backend`` is ``"auto"`` (CPU tensors on the
    CPU, CUDA tensors on their GPU), ``"cpu"``, ``"reference"`` (the float64 interpreter, for
    checking) or a device that steps CPU tensors on copies it keeps (``"opencl"``,
    ``"webgpu"``: optimizer.state gets the device's values after each step, and a state the
    user changed in place goes to the device at the next); ``optjit._optjit.backends()`` lists
    them, and another name is refused here. ``param_rounding="stochastic"`` stores bf16
    parameters with deterministic stochastic rounding (torchao's ``bf16_stochastic_round``).
    With quantized state (``state_format="8bit"``, ...), a param group's ``"quantize_state"``
    chooses for its parameters: False keeps their state in f32 (embeddings, as bitsandbytes'
    per-parameter ``optim_bits=32``), True quantizes it below the format's 4096 elements too.
    """

    _step_supports_amp_scaling = True

    def __init__(self, params: Iterable, pipeline: Union[str, "os.PathLike[str]"],
                 defaults: Optional[Dict[str, Any]] = None, *, backend: str = "auto",
                 cache: bool = True, device_step: Optional[bool] = None,
                 cuda_graph: bool = False, param_rounding: str = "nearest", process_group=None,
                 shard_order: str = "by_tensor"):
        # The text (of the file, where it names one): what steps in front of it (a deferred
        # clip, a GradScaler's unscaling) is chained to the text, not to a file name.
        pipeline = _optjit.pipeline_text(pipeline)
        self._lock = threading.RLock()  # (_one_at_a_time; torch's __init__ adds the groups)
        self._pipeline = pipeline
        self._text = pipeline  # the caller's, without what _compose puts in front
        self._clip_fused = False  # a deferred clip_grad_norm_ is in front of the pipeline
        self._clip: Optional[_DeferredClip] = None  # one waiting for the next step
        self._process_group = process_group
        self._shard_order = shard_order
        self._scaled = False  # a GradScaler's grad_scaler is in front of the pipeline
        self._backend = backend
        self._cache = cache
        self._device_step = device_step
        self._cuda_graph = cuda_graph
        if backend not in _optjit.backends():  # checked here, not at the first step
            raise ValueError(f"backend: {backend!r} is not one of "
                             + ", ".join(repr(b) for b in _optjit.backends()))
        if not isinstance(cache, bool):
            raise TypeError(f"cache takes True or False, not {cache!r}")
        if shard_order not in ("by_tensor", "by_process"):
            raise ValueError(f"shard_order: {shard_order!r} is not 'by_tensor' or 'by_process'")
        if process_group is not None and not (
                torch.distributed.is_available()
                and isinstance(process_group, torch.distributed.ProcessGroup)):
            raise TypeError(f"process_group takes a torch.distributed ProcessGroup, not "
                            f"{type(process_group).__name__}")
        if param_rounding not in ("nearest", "stochastic"):
            raise ValueError(f"param_rounding: {param_rounding!r} is not 'nearest' or 'stochastic'")
        self._param_rounding = param_rounding
        # by (pipeline, members), least recently stepped first (_engines_for keeps _KEPT_ENGINES)
        self._engines: "collections.OrderedDict[Tuple, _Engine]" = collections.OrderedDict()
        # Set when optimizer.state changes outside a step (a replaced state tensor): the next
        # step binds the state afresh (shared with the tracked state dicts).
        self._changed = [False]
        self._code_maps: Dict[Tuple[int, str], str] = {}  # (id(p), state): format of loaded codes
        # (id(p), state): the memory order flat (4-bit) codes are in, as strides
        self._code_orders: Dict[Tuple[int, str], List[int]] = {}
        self._split = False  # the last engines step sets of parameters apart (_unscale_and_clip)
        self._last_key: Optional[List[int]] = None  # the parameters that had gradients last step
        self._last: List[_Engine] = []
        # A bad pipeline is an error now, not at the first step, checked for the first
        # parameter's dtype (master_weights(low16=true) wants bf16 parameters).
        def listed(ps):  # (a set stays a set: torch refuses it, with its reason)
            return [ps] if isinstance(ps, torch.Tensor) else ps if isinstance(ps, set) else list(ps)

        if isinstance(params, torch.Tensor):  # (iterated, its rows were "non-leaf tensors")
            raise TypeError("params argument given to the optimizer should be an iterable of "
                            "Tensors or dicts, but got " + torch.typename(params))
        params = [dict(p, params=listed(p["params"])) if isinstance(p, dict) else p
                  for p in params]
        first = next((q for p in params for q in (p["params"] if isinstance(p, dict) else [p])),
                     None)
        _optjit.plan(pipeline, _DTYPE_NAMES.get(getattr(first, "dtype", None), "f32"))
        super().__init__(params, dict(defaults or {}))
        _OPTIMIZERS.add(self)  # (clip_grad_norm_ looks for the optimizer of its parameters)

    # Whether sparse gradients (nn.Embedding(sparse=True)) are stepped: by the built-ins whose
    # torch counterparts step them (SGD, Adagrad), as dense ones (_Engine.densify).
    _sparse_grads = False

    # What pickling keeps besides torch's own (defaults, state, param_groups): the
    # configuration. The engines are rebuilt from the state at the next step.
    _pickled: Tuple[str, ...] = ("_pipeline", "_text", "_clip_fused", "_shard_order", "_scaled",
                                 "_backend", "_cache", "_device_step", "_cuda_graph",
                                 "_param_rounding")

    def __getstate__(self) -> Dict[str, Any]:
        """copy.deepcopy(optimizer), pickle, torch.save(optimizer): torch's state and this
        optimizer's configuration (a process group cannot be pickled: save its state_dict)."""
        if getattr(self, "_process_group", None) is not None:
            raise TypeError("optjit.torch: an optimizer sharded over a process group cannot be "
                            "pickled or deep-copied; save its state_dict() instead")
        st = super().__getstate__()
        st["state"] = _plain_states((k, dict(v)) for k, v in st["state"].items())
        st["optjit"] = {k: getattr(self, k) for k in self._pickled if hasattr(self, k)}
        # What the state's codes are (the format of loaded codes not yet stepped, the memory
        # order of flat 4-bit codes) is keyed by id(p), which a copy does not keep: by the
        # parameter's index, as state_dict() keys the state.
        index = {id(p): i for i, p in enumerate(self._params())}
        for attr in ("_code_maps", "_code_orders"):
            st["optjit"][attr] = {(index[pid], name): v
                                  for (pid, name), v in getattr(self, attr, {}).items()
                                  if pid in index}
        return st

    def __setstate__(self, state: Dict[str, Any]) -> None:
        config = dict(state.pop("optjit", {}))
        codes = {attr: config.pop(attr, {}) for attr in ("_code_maps", "_code_orders")}
        self._lock = threading.RLock()
        super().__setstate__(state)
        self.__dict__.update(config)
        params = self._params()
        for attr, by_index in codes.items():
            setattr(self, attr, {(id(params[i]), name): v for (i, name), v in by_index.items()})
        self._process_group = None
        self._engines = collections.OrderedDict()
        self._changed = [False]
        self._split = False
        self._last_key, self._last = None, []
        self._clip = None  # (a deferred clip belongs to the gradients of the original)
        if "_text" not in self.__dict__:  # pickled before _text was kept: the unwrapped text
            text, front = self._pipeline, "chain(grad_scaler(scale=65536.0), "
            if self._scaled and text.startswith(front):
                text = text[len(front):-1]
            self._text, self._clip_fused = text, False
        _OPTIMIZERS.add(self)

    def __setattr__(self, name: str, value: Any) -> None:
        # ``optimizer.state = defaultdict(dict)`` (a reset some training scripts do): the next
        # step starts every state afresh, as torch's would, instead of stepping the old one.
        if name == "state" and "_changed" in self.__dict__:
            self._changed[0] = True
        super().__setattr__(name, value)

    @property
    def pipeline(self) -> str:
        return self._pipeline

    def _params(self) -> List[torch.Tensor]:
        """Every parameter, in the order state_dict() numbers them."""
        return [p for g in self.param_groups for p in g["params"]]

    def _hyper_groups(self) -> List[Dict[str, Any]]:
        """The param groups as the program's hyperparameters name them (read before each
        step): the groups themselves, but for a drop-in whose groups use its peer's names."""
        return self.param_groups

    @_one_at_a_time
    def add_param_group(self, param_group: Dict[str, Any]) -> None:
        # A parameter twice (in one group or two): refused now, not at the first step, where
        # the engine finds two parameters over the same memory (torch warns that it will refuse
        # it, and steps it twice).
        params = param_group["params"]
        if isinstance(params, set):  # torch refuses a set (unordered): its message
            return super().add_param_group(param_group)
        params = [params] if isinstance(params, torch.Tensor) else list(params)
        param_group["params"] = params
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        for p in params:
            if isinstance(p, tuple):  # (name, parameter), as named_parameters() gives them
                p = p[1]
            if id(p) in seen:
                raise Error("a parameter appears twice among the optimizer's parameters; "
                            "optjit steps each once (torch warns it will refuse this)")
            seen.add(id(p))
        super().add_param_group(param_group)
        if hasattr(self, "_engines"):
            self._forget()  # the groups changed: engines are rebuilt at the next step

    @_one_at_a_time
    def state_dict(self) -> Dict[str, Any]:
        sd = super().state_dict()
        # Plain dicts (the same tensors), as torch's: torch.load(weights_only=True) takes them.
        sd["state"] = {k: dict(v) if isinstance(v, _TrackedState) else v
                       for k, v in sd["state"].items()}
        # Each quantized state's format ("exp_avg.format": "q8"), so that the checkpoint loads
        # into another state_format as its values; and for flat codes (4-bit: two to a byte, in
        # the parameter's memory order) that order ("exp_avg.strides": the parameter's strides),
        # so that they load into the model in another memory_format.
        for eng in getattr(self, "_engines", {}).values():
            for k, (_, i, p) in enumerate(eng.members):
                for name in eng.engine.state_buffers:
                    if i in sd["state"] and eng.engine.state_storage(k, name) == "u8":
                        sd["state"][i][name + ".format"] = eng.engine.state_quant(name)
        # Codes loaded and not yet stepped (no engine holds them): the format they came with.
        index = {id(p): i for i, p in enumerate(self._params())}
        for (pid, name), fmt in self._code_maps.items():
            st = sd["state"].get(index.get(pid))
            if st is not None and name in st:
                st.setdefault(name + ".format", fmt)
        for (pid, name), order in self._code_orders.items():
            st = sd["state"].get(index.get(pid))
            if st is not None and name + ".format" in st:
                st[name + ".strides"] = order
        return sd

    @_one_at_a_time
    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        # Other optimizers' quantized states in optjit's names, and the format of every set of
        # codes loaded (bitsandbytes', torchao's, optjit's own ".format"), which the next step
        # compares with the state's own.
        maps: Dict[Tuple[Any, str], str] = {}
        orders: Dict[Tuple[Any, str], List[int]] = {}
        if isinstance(state_dict, dict) and isinstance(state_dict.get("state"), dict):
            state_dict = dict(state_dict, state={
                pid: self._own_state(pid, st, maps, orders) if isinstance(st, dict) else st
                for pid, st in state_dict["state"].items()})
        if isinstance(state_dict, dict) and isinstance(state_dict.get("param_groups"), list):
            state_dict = dict(state_dict, param_groups=[
                self._own_group(g) if isinstance(g, dict) else g
                for g in state_dict["param_groups"]])
        # torch casts every state tensor to its parameter's dtype; 8-bit codes (uint8) and their
        # f32 per-block scales ("exp_avg.absmax") keep theirs, or they would be lost.
        kept = {}
        for pid, st in state_dict.get("state", {}).items():
            if not isinstance(st, dict):  # (torch would keep it, and fail at the step)
                raise Error(f"the state dict's state of parameter {pid} is {st!r:.60}, not a "
                            f"dict of state tensors")
            for k, v in st.items():
                if isinstance(v, torch.Tensor) and k != "step" and (
                        v.dtype == torch.uint8 or k.endswith(".absmax")):
                    kept[(pid, k)] = v
        super().load_state_dict(state_dict)
        # New state tensors: the next step's engines adopt them. (Dropped first: what dropped
        # engines leave in _code_maps is replaced by the loaded codes' formats below.)
        self._forget()
        saved_ids = [i for g in state_dict["param_groups"] for i in g["params"]]
        by_id = dict(zip(saved_ids, self._params()))
        for (pid, k), v in kept.items():
            p = by_id[pid]
            self.state[p][k] = v.detach().clone().to(device=p.device)
        self._code_maps = {(id(by_id[pid]), k): fmt for (pid, k), fmt in maps.items()}
        self._code_orders = {(id(by_id[pid]), k): o for (pid, k), o in orders.items()}
        for st in self.state.values():
            # A step count of its own: a state dict holds the live one of the optimizer it came
            # from (torch's, torchao's, which cannot be deep-copied), which steps on.
            if isinstance(st.get("step"), torch.Tensor):
                dict.__setitem__(st, "step", st["step"].detach().clone())

    def _own_state(self, pid, st: Dict[str, Any], maps: Dict[Tuple[Any, str], str],
                   orders: Dict[Tuple[Any, str], List[int]]):
        """One parameter's loaded state in optjit's names (a copy): bitsandbytes' packed state,
        torchao's tensor subclasses (their codes and scales, copied now: torchao's state dict
        holds its live states), optjit's own format names; `maps` gets the codes' formats."""
        if "__bnb_optimizer_quant_state__" in st or "state1" in st:
            st = self._from_bitsandbytes(pid, st, maps)
        st = dict(st)
        for k, v in list(st.items()):
            if isinstance(k, str) and k.endswith(".strides"):  # (flat codes' memory order)
                order = st.pop(k)
                if (not isinstance(order, (list, tuple))
                        or not all(isinstance(x, int) for x in order)):
                    raise Error(f"the state dict's {k} of parameter {pid} is {order!r}, not a "
                                f"list of strides")
                orders[(pid, k[:-len(".strides")])] = list(order)
            elif isinstance(k, str) and k.endswith(".format"):  # optjit's ("exp_avg.format")
                fmt = st.pop(k)
                if not _is_quant_format(fmt):
                    raise Error(f"the state dict's {k} of parameter {pid} is {fmt!r}, not one of "
                                f"optjit's quantized formats")
                maps[(pid, k[:-len(".format")])] = fmt
            elif (isinstance(v, torch.Tensor) and type(v) not in (torch.Tensor, torch.nn.Parameter)
                  and hasattr(_local(v), "codes")):  # torchao's (under FSDP2: in a DTensor)
                taken = _torchao_codes(_local(v))  # (a shard's: codes and scales of its blocks)
                if taken is not None:
                    maps[(pid, k)], st[k], st[k + ".absmax"] = taken
                elif hasattr(_local(v), "dequantize"):
                    st[k] = _local(v).dequantize()
        return st

    # What bitsandbytes' SGD and RMSprop keep in a group's betas: (momentum, dampening) and
    # (alpha, momentum); it steps without the second of each.
    _BNB_BETAS = {"sgd": ("momentum", "dampening"), "rmsprop": ("alpha", "momentum")}

    def _own_group(self, group: Dict[str, Any]) -> Dict[str, Any]:
        """A loaded param group in this optimizer's names: bitsandbytes' SGD and RMSprop name
        momentum and alpha betas[0] (torch's load_state_dict takes the saved groups as they are,
        and a program hyperparameter that no group holds would silently keep the
        constructor's value)."""
        names = self._BNB_BETAS.get(getattr(self, "_name", None))
        if names is None or "betas" not in group or names[0] in group:
            return group
        group = dict(group)
        betas = group.pop("betas")
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise Error(f"the state dict's param group has betas={betas!r}: a bitsandbytes "
                        f"{self._name} group holds ({', '.join(names)})")
        group[names[0]], group[names[1]] = betas[0], 0.0  # (as bitsandbytes stepped)
        return group

    # bitsandbytes' 8-bit optimizers' states (state1, state2), by optjit built-in; a tuple is
    # states stacked in one (AdEMAMix's state1: its fast and slow averages, (2, *shape), and
    # their absmax1, (2, blocks)).
    _BNB_STATES = {"adam": ("exp_avg", "exp_avg_sq"), "adamw": ("exp_avg", "exp_avg_sq"),
                   "lion": ("exp_avg",), "rmsprop": ("square_avg",),
                   "sgd": ("momentum_buffer",), "adagrad": ("sum",),
                   "ademamix": (("exp_avg", "exp_avg_slow"), "exp_avg_sq")}

    def _from_bitsandbytes(self, pid, st: Dict[str, Any], maps: Dict[Tuple[Any, str], str]):
        """A bitsandbytes optimizer's state of one parameter (Adam8bit, AdamW8bit, Lion8bit,
        RMSprop8bit, SGD8bit, Adagrad8bit, AdEMAMix8bit, or their 32-bit forms) in optjit's
        names: its codes and absmax are optjit's 8-bit state as they are (the same maps and
        blocks), so a bitsandbytes run continues in optjit.torch.<name>(state_format="8bit")."""
        names = self._BNB_STATES.get(getattr(self, "_name", None))
        if names is None:
            # (this module's classes, as spelled: AdamW, RMSprop, SGD, AdEMAMix)
            takers = [n for n in __all__ if getattr(globals()[n], "_name", "") in self._BNB_STATES]
            raise Error(f"a bitsandbytes checkpoint loads into optjit.torch's "
                        f"{', '.join(takers)}, not {type(self).__name__}")
        st = dict(st)
        st.update(st.pop("__bnb_optimizer_quant_state__", {}))
        new = {}
        for k, v in st.items():
            if k in ("max1", "max2", "new_max1", "new_max2"):
                raise Error("a bitsandbytes checkpoint of non-blockwise 8-bit state "
                            "(block_wise=False): optjit's 8-bit state is blockwise")
            if k[:-1] in ("state", "absmax", "qmap") and k[-1] in "12":
                j = int(k[-1]) - 1
                if j >= len(names):
                    raise Error(f"the bitsandbytes checkpoint has {k} for parameter {pid}, "
                                f"which {type(self).__name__} does not keep")
                stacked = names[j] if isinstance(names[j], tuple) else (names[j],)
                if k.startswith("qmap"):
                    fmt = next((f for f in ("q8", "q8u")
                                if v.tolist() == _optjit.quant_map(f)), None)
                    if fmt is None:
                        raise Error(f"the bitsandbytes checkpoint's {k} is not its dynamic "
                                    f"map, which optjit's 8-bit state uses")
                    for name in stacked:
                        maps[(pid, name)] = fmt
                    continue
                suffix = ".absmax" if k.startswith("absmax") else ""
                if len(stacked) == 1:
                    new[stacked[0] + suffix] = v
                    continue
                if (not isinstance(v, torch.Tensor) or v.dim() == 0
                        or v.shape[0] != len(stacked)):
                    raise Error(f"the bitsandbytes checkpoint's {k} of parameter {pid} has "
                                f"shape {tuple(getattr(v, 'shape', ()))}: {type(self).__name__} "
                                f"keeps {', '.join(stacked)} stacked there, ({len(stacked)}, ...)")
                for name, part in zip(stacked, v.unbind(0)):
                    new[name + suffix] = part
            elif k == "step":
                new[k] = v if isinstance(v, torch.Tensor) else torch.tensor(
                    _number_of(v, f"the bitsandbytes checkpoint's step of parameter {pid}"))
            else:
                new[k] = v
        return new

    def _shard_spec(self, members):
        """The engine's parameter names, and its sharded step over torch.distributed (None for
        an unsharded one): every reduction (the fused clip's norm, a GradScaler's found-inf,
        LAMB's per-tensor norms) is completed over the process group, one all_reduce per pass.
        - DTensor parameters (FSDP2's fully_shard): each process steps its local shards;
        - plain tensors with process_group= (ZeRO-1 by tensor): each process passes the
          parameters it owns; the model is every process's parameters in rank order."""
        params = [p for _, _, p in members]
        names = [f"p{i}" for _, i, _ in members]
        dt = [_is_dtensor(p) for p in params]
        if self._process_group is None and not any(dt):
            return names, None
        if any(dt) and not all(dt):
            raise Error("a sharded step takes DTensor parameters only (FSDP2's fully_shard), or "
                        "plain tensors only (each process's own, with process_group=)")
        import torch.distributed as dist
        pg = self._process_group
        if pg is None:
            pg = params[0].device_mesh.get_group()
        if all(dt):
            everything = [(p, g) for g in self.param_groups for p in g["params"]]
            tensors = [(f"p{i}", int(p.numel()),
                        _rows_hold_blocks(p) and self._state_quantized(p, g) is not False)
                       for i, (p, g) in enumerate(everything)]
            offsets = [_flat_offset(p) for p in params]
        else:
            rank = dist.get_rank(pg)
            names = [f"r{rank}.p{i}" for _, i, _ in members]
            mine = [(n, int(p.numel())) for n, p in zip(names, params)]
            everyone = [None] * dist.get_world_size(pg)
            dist.all_gather_object(everyone, mine, group=pg)
            tensors = [t for theirs in everyone for t in theirs]
            offsets = [0] * len(params)
        backend = str(dist.get_backend(pg))
        device = params[0].device

        def all_reduce(buf):
            t = torch.from_numpy(buf)
            if backend == "nccl":  # NCCL sums device memory: through the GPU and back
                d = t.to(device)
                dist.all_reduce(d, group=pg)
                t.copy_(d.cpu())
            else:
                dist.all_reduce(t, group=pg)

        def all_reduce_device(address, count):
            # The device step's partials where they are (NCCL on the current stream, which is
            # the engine's while it steps): no copy, no host round trip.
            dist.all_reduce(torch.as_tensor(_CudaArray(address, count), device=device), group=pg)

        return names, (all_reduce, dist.get_rank(pg), dist.get_world_size(pg),
                       f"torch.distributed ({backend})", tensors, offsets, self._shard_order,
                       all_reduce_device if backend == "nccl" else None)

    def _tracked_state(self, p: torch.Tensor) -> "_TrackedState":
        """optimizer.state[p], made a dict that tells the next step when it changes."""
        if not isinstance(self.state, _TrackedStates) or self.state.changed is not self._changed:
            # (The same state, tracked: not a change, so not through __setattr__.)
            self.__dict__["state"] = _TrackedStates(self.state, self._changed)
        st = self.state[p]
        if not isinstance(st, _TrackedState) or st.changed is not self._changed:
            st = _TrackedState(st, self._changed)
            dict.__setitem__(self.state, p, st)
        return st

    def _forget(self) -> None:
        """Drops the engines: the next step builds them afresh from the state."""
        self._let_go(self._engines.values())
        self._engines.clear()
        self._last_key, self._last = None, []

    def _let_go(self, engines) -> None:
        """Engines dropped: the format of the codes their quantized states hold stays known, as
        for codes loaded and not yet stepped (_code_maps), for state_dict() to write and the
        next engine to read them by. (Dropped after add_param_group, state_dict() wrote codes
        without their format until the next step: a checkpoint that no other state_format could
        load.)"""
        for eng in engines:
            for k, (_, _, p) in enumerate(eng.members):
                for name in eng.engine.state_buffers:
                    if eng.engine.state_storage(k, name) == "u8":
                        self._code_maps[(id(p), name)] = eng.engine.state_quant(name)

    def _source(self) -> str:
        """The program before what steps in front of it (_compose)."""
        return self._text

    def _compose(self) -> None:
        """The program: the source, behind a GradScaler's unscaling once a scaler has stepped
        it, and behind a deferred clip_grad_norm_'s scaling once one was deferred (torch's
        order: the clip scales what the scaler's step then unscales). The engines are rebuilt
        at the next step and adopt the state."""
        text = self._source()
        if self._scaled:
            text = _in_front(text, "grad_scaler(scale=65536.0)")
        if self._clip_fused:
            text = _in_front(text, _DEFERRED_CALL, _DEFERRED_DECLARATION)
        self._pipeline = text
        self._forget()

    def zero_grad(self, set_to_none: bool = True) -> None:
        self._clip = None  # a deferred clip of the gradients goes with them
        super().zero_grad(set_to_none)

    def _take_clip(self) -> Optional["_DeferredClip"]:
        """The clip_grad_norm_ deferred to this step, if it still applies (see _DeferredClip)."""
        clip, self._clip = self._clip, None
        return clip if clip is not None and clip.applies(self) else None

    def plan(self) -> str:
        """The plan of the pipeline (passes, bytes per parameter), as ``optjit plan`` prints it."""
        return _optjit.plan(self._pipeline)

    def _active(self) -> List[Tuple[int, int, torch.Tensor]]:
        """(group, index, parameter) of every parameter with a gradient."""
        out, index = [], 0
        for g, group in enumerate(self.param_groups):
            for p in group["params"]:
                if p.grad is not None:
                    out.append((g, index, p))
                index += 1
        return out

    def _gradients(self) -> Tuple[List[torch.Tensor], List[int]]:
        """The gradients there are and id() of their parameters, in order: every step reads
        these, so no object is made per parameter (a tuple each made the garbage collector scan
        a large model's tensors every few steps)."""
        grads: List[torch.Tensor] = []
        ids: List[int] = []
        for group in self.param_groups:
            for p in group["params"]:
                gr = p.grad
                if gr is not None:
                    grads.append(gr)
                    ids.append(id(p))
        return grads, ids

    def _partitions(self, active):
        """Tensors that step together: same device and same step count (a parameter whose grad
        was None for a while has fewer steps, as in torch), and in each param group the same
        scalar states. torch keeps those per parameter (ASGD's eta follows the lr of the
        parameter's last step; NAdam's mu_product the betas then), an engine one per group:
        parameters of a group whose scalars differ step apart. (Read only when the set of
        parameters with gradients changes, not at every step.)"""
        names = _scalar_state_names(self._pipeline, active[0][2].dtype) if active else ()
        parts: Dict[Tuple, List] = {}
        for m in active:
            p = m[2]
            st = self.state.get(p, {})
            step = _step_count(st["step"], m[1]) if "step" in st else 0
            parts.setdefault((str(p.device), step), []).append(m)
        out = []
        for members in parts.values():
            # Per group, its members by their scalar states' values; the k-th kind of every
            # group steps in the k-th engine (one engine where they all agree).
            kinds: Dict[int, Dict[Tuple, List]] = {}
            for m in members:
                st = self.state.get(m[2], {})
                scalars = tuple(sorted(
                    (k, x if (x := float(v)) == x else "nan") for k, v in st.items()
                    if k in names and isinstance(v, torch.Tensor) and v.dim() == 0
                    and v.is_floating_point()))
                kinds.setdefault(m[0], {}).setdefault(scalars, []).append(m)
            split: List[List] = []  # (each in the parameters' order, as the groups are)
            for by_value in kinds.values():
                for k, ms in enumerate(by_value.values()):
                    if k == len(split):
                        split.append([])
                    split[k].extend(ms)
            out += split
        return out

    def _before_step(self) -> None:
        """What a subclass checks before each step."""

    def _state_quantized(self, p: torch.Tensor, group: Dict[str, Any]) -> Optional[bool]:
        """Whether parameter p (of param group `group`) keeps its quantized states
        (state_format "8bit", ...) quantized: its group's "quantize_state" (False: f32 state,
        True: quantized below the format's minimum too), else None, as the format decides by
        p's size. The drop-ins for bitsandbytes and torchao decide as those do (min_8bit_size,
        per-parameter overrides, whole blocks). Read when the step's engines are built."""
        q = group.get("quantize_state")
        if q is not None and not isinstance(q, bool):
            raise Error(f"a param group's 'quantize_state' is {q!r}: True, False or None")
        return q

    def _unfused_pipeline(self) -> Optional[str]:
        """The program without its reductions over all tensors (clip, grad scaler), which
        _unscale_and_clip then does with torch; None where there is no such split (any
        pipeline text)."""
        return None

    def _unfused_clip(self) -> Optional[Tuple[float, float]]:
        """(max_norm, norm_type) that _unscale_and_clip applies with torch, or None."""
        return None

    def _engines_for(self, parts, pipeline: str) -> List[_Engine]:
        engines = []
        for members in parts:
            ekey = (pipeline, tuple((g, i, id(p)) for g, i, p in members))
            eng = self._engines.get(ekey)
            if eng is not None and eng.relaid():
                eng = None  # a new one adopts the state in the parameters' new layout
            if eng is None:
                eng = _Engine(self, members, pipeline)
                self._engines[ekey] = eng
            else:
                self._engines.move_to_end(ekey)
            engines.append(eng)
        # The engines of sets of parameters that have not stepped for longest go: layers dropped
        # at random make another set nearly every step, and each set's engine was kept for good
        # (memory, and, before the JIT shared its code, mappings, grew with every step).
        while len(self._engines) > max(_KEPT_ENGINES, len(engines)):
            _, old = self._engines.popitem(last=False)
            self._let_go([old])
        return engines

    def _unscale_and_clip(self, scale, found_inf) -> bool:
        """What the fused program does over all tensors, done with torch over every parameter
        with a gradient, as torch's own GradScaler.unscale_ and clip_grad_norm_ do it (for
        parameters the engines step in several sets). True: skip the step (found Inf/NaN)."""
        params = [p for eng in self._last for p in eng.params]
        if self._scaled:
            if found_inf is not None and float(found_inf) != 0:  # (on a GPU: one host read)
                return True
            if scale is not None:
                inv = (scale.double().reciprocal().float() if isinstance(scale, torch.Tensor)
                       else torch.tensor(1.0 / float(scale), dtype=torch.float32))
                by: Dict[Tuple[torch.device, torch.dtype], List[torch.Tensor]] = {}
                for p in params:
                    by.setdefault((p.grad.device, p.grad.dtype), []).append(p.grad)
                for (device, _), grads in by.items():
                    seen = torch.zeros(1, device=device)
                    torch._amp_foreach_non_finite_check_and_unscale_(grads, seen,
                                                                     inv.to(device))
        clip = self._unfused_clip()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(params, clip[0], norm_type=clip[1])
        return False

    # Under torch.compile the step is one opaque call into optjit (its kernels are compiled
    # already): dynamo skips it instead of tracing into it and breaking the graph there.
    @torch.compiler.disable
    @torch.no_grad()
    @_one_at_a_time
    def step(self, closure: Optional[Callable[[], float]] = None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._before_step()
        clip = self._take_clip()
        scale = getattr(self, "grad_scale", None)
        found_inf = getattr(self, "found_inf", None)
        if scale is not None and not self._scaled:
            # The first step under a GradScaler: unscale and skip inside the fused step from now
            # on (the state is adopted by the new engines; nothing restarts).
            self._scaled = True
            self._compose()
        if clip is not None and not self._clip_fused:
            # The first deferred clip: the scaling is in the fused step from now on (by 1 at
            # steps without one).
            self._clip_fused = True
            self._compose()
        # (On a GPU the fused step finds the Inf itself, with no host round trip.)
        on_gpu = isinstance(found_inf, torch.Tensor) and found_inf.device.type != "cpu"
        if found_inf is not None and not on_gpu and float(found_inf) != 0:
            return loss  # torch's scaler saw Inf/NaN: skipped, as its fused optimizers skip
        grads, key = self._gradients()
        if not key:
            return loss
        for eng in self._last:
            if eng.changed_in_place():
                self._changed[0] = True  # (the engines take the counts and scalars anew)
        if self._changed[0]:
            # optimizer.state was changed since the last step (a state tensor replaced, a
            # parameter's state dict emptied, a step count changed in place): new engines adopt
            # what it holds now and start what it lacks afresh, as torch would. (A device
            # backend's state is in it: each step synced it.)
            self._forget()
        if key == self._last_key and not all(eng.check_params() for eng in self._last):
            self._last_key = None  # _engines_for replaces the engines whose parameters moved
        if key != self._last_key:
            active = self._active()
            # Another set of parameters has gradients than last step: find (or build) the
            # engines for it and bind their state afresh.
            self._last_key, self._last = None, []
            parts = self._partitions(active)
            engines = self._engines_for(parts, self._pipeline)
            split = len(engines) > 1 and any(e.engine.reduces_over_all_tensors for e in engines)
            if split:
                # Parameters with different step counts (some unfrozen later, or first given a
                # gradient later) or on several devices, and a reduction over all of them (the
                # fused clip, a GradScaler's found-inf): torch's own unscale and clip run first,
                # over all of them, then the optimizer's program steps each set.
                # (Sharded, torch's clip would see only this process's pieces.)
                unfused = self._unfused_pipeline() if self._process_group is None else None
                if unfused is None:
                    raise Error(
                        "this pipeline reduces over all tensors (clipping, a grad scaler), but "
                        "the parameters with gradients are on several devices or have different "
                        "step counts; optjit steps them together only when they share both (the "
                        "built-in optimizers, e.g. optjit.torch.AdamW(max_grad_norm=...), clip "
                        "with torch first in that case)")
                engines = self._engines_for(parts, unfused)
            for eng in engines:
                eng.bind(self)
            self._changed[0] = False  # (binding wrote the state it adopted)
            self._last_key, self._last, self._split = key, engines, split
        coef = None
        if clip is not None:
            if not self._split and clip.covers(key):
                coef = clip.coef
            else:  # (other parameters step too, or several programs): torch's scaling, now
                clip.scale_gradients()
        if self._split and self._unscale_and_clip(scale, found_inf):
            return loss  # an Inf or NaN gradient: skipped, as torch's scaler skips
        hyper_groups = self._hyper_groups()
        for eng in self._last:
            eng.sync_hypers(hyper_groups)
            if self._scaled and not self._split:
                eng.set_scale(scale)
            if self._clip_fused and not self._split:
                eng.set_clip_coef(coef)
        if len(self._last) == 1:  # its members are `active`, in order
            self._last[0].step(grads)
        else:
            for eng in self._last:
                eng.step()
        return loss

    @_one_at_a_time
    def tune(self, budget_seconds: float = 10.0, max_candidates: int = 24) -> Dict[str, Any]:
        """Tunes the launch on these very tensors (with their current gradients), as
        ``optjit tune`` does; parameters and state are as before afterwards."""
        self._before_step()
        active = self._active()
        if not active:
            raise Error("tune() needs gradients: run backward() first")
        parts = self._partitions(active)
        if len(parts) != 1:
            raise Error("tune() tunes parameters on one device with one step count")
        eng = _Engine(self, parts[0])
        return eng.engine.tune([p.grad.detach() for _, _, p in parts[0]], budget_seconds,
                               max_candidates)


_DTYPE_NAMES = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16",
                torch.float64: "f64"}
_TORCH_DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16,
                 "f64": torch.float64, "u8": torch.uint8, "u16": torch.uint16}


_REQUIRED = object()  # a parameter without a default


def _peer_arguments(name: str, signature: Dict[str, Any], args: Tuple[Any, ...],
                    kwargs: Dict[str, Any]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """Another package's constructor arguments after `params` (`signature`: their names in
    order, with defaults or _REQUIRED) bound as Python binds them, with Python's errors; and
    optjit's own keywords among kwargs, apart."""
    if len(args) > len(signature):
        raise TypeError(f"{name}() takes {len(signature) + 1} positional arguments but "
                        f"{len(args) + 1} were given")
    v = dict(zip(signature, args))
    extra = {}
    for k, x in kwargs.items():
        if k in v:
            raise TypeError(f"{name}() got multiple values for argument '{k}'")
        if k in signature:
            v[k] = x
        elif k in _OPTJIT_KEYWORDS:
            extra[k] = x
        else:
            raise TypeError(f"{name}() got an unexpected keyword argument '{k}'")
    for k, d in signature.items():
        if k not in v:
            if d is _REQUIRED:
                raise TypeError(f"{name}() missing 1 required positional argument: '{k}'")
            v[k] = d
    return v, extra


def _peer_signature(signature: Dict[str, Any], keyword_only: Dict[str, Any] = {}):
    """The inspect.Signature of such a constructor (help(), IDEs): self, params, `signature`'s
    parameters, then `keyword_only`'s."""
    P = inspect.Parameter
    return inspect.Signature(
        [P("self", P.POSITIONAL_OR_KEYWORD), P("params", P.POSITIONAL_OR_KEYWORD)]
        + [P(k, P.POSITIONAL_OR_KEYWORD, default=P.empty if d is _REQUIRED else d)
           for k, d in signature.items()]
        + [P(k, P.KEYWORD_ONLY, default=d) for k, d in keyword_only.items()])


class Installed:
    """What a drop-in's ``install()`` replaced in its peer's modules, put back by
    ``uninstall()`` or by leaving a ``with`` block."""

    def __init__(self, replaced: List[Tuple[Any, str, Any]]):
        self._replaced = replaced

    def uninstall(self) -> None:
        for module, attr, original in reversed(self._replaced):
            setattr(module, attr, original)
        self._replaced = []

    def __enter__(self) -> "Installed":
        return self

    def __exit__(self, *exc) -> None:
        self.uninstall()


def _install(package: str, ours: Dict[str, type], defer_clip: bool = True) -> Installed:
    """The drop-in classes `ours` in place of the peer's own of the same names, in every module
    of `package` that holds them (package.optim, the module that defines each, ...): code that
    finds them there after this (a trainer's `from bitsandbytes.optim import AdamW`) makes
    optjit's. A class the drop-in does not have stays the peer's. With `defer_clip`,
    clip_grad_norm_ (above) in place of torch's too."""
    import importlib
    try:
        root = importlib.import_module(package + ".optim")
    except ImportError as e:
        raise Error(f"optjit.{package}.install(): {package} is not installed ({e}); without it, "
                    f"make optjit.{package}.optim's classes directly") from None
    originals = {}
    for name, cls in ours.items():
        theirs = getattr(root, name, None)
        if theirs is not None and theirs is not cls:  # (installed already: nothing to do)
            originals[id(theirs)] = (theirs, cls)
    replaced: List[Tuple[Any, str, Any]] = []
    for module_name, module in list(sys.modules.items()):
        if module is None or not (module_name == package or
                                  module_name.startswith(package + ".")):
            continue
        for attr, value in list(vars(module).items()):
            found = originals.get(id(value))
            if found is not None and found[0] is value:
                setattr(module, attr, found[1])
                replaced.append((module, attr, value))
    if defer_clip:
        for module in (torch.nn.utils, torch.nn.utils.clip_grad):
            if getattr(module, "clip_grad_norm_", None) is _torch_clip_grad_norm_:
                module.clip_grad_norm_ = clip_grad_norm_
                replaced.append((module, "clip_grad_norm_", _torch_clip_grad_norm_))
    return Installed(replaced)


def _with_clip(transform: str, max_grad_norm: Optional[float], norm_type: float) -> str:
    if max_grad_norm is None:
        return transform
    return (f"chain(clip_grad_norm(max_norm={_number(max_grad_norm, 'max_grad_norm')}, "
            f"norm_type={_number(norm_type, 'norm_type')}), {transform})")


class _Builtin(Optimizer):
    """A built-in with torch's signature and defaults; ``max_grad_norm`` (and ``norm_type``)
    fuse ``torch.nn.utils.clip_grad_norm_`` into the step."""
    _name = ""
    _structural: Tuple[str, ...] = ()  # booleans that choose the program's structure
    # Hyperparameters whose 0 leaves a part of the program out (SGD's and RMSprop's momentum:
    # no buffer), each with the state whose absence torch reads as that part's first step, if
    # any (SGD starts its buffer from the gradient then; RMSprop from zeros, as here).
    _turned_on: Dict[str, Optional[str]] = {}
    _none_is_zero: Tuple[str, ...] = ()  # hyperparameters whose None (off) the program reads as 0
    _group_constants: Dict[str, Any] = {}  # keys torch's groups hold beside its signature's
    _torch_scalars = False  # it keeps 0-dim states in torch's scalar dtype (scalar_dtype=)
    _pickled = Optimizer._pickled + ("_built", "_given", "_pipeline_args", "_scalars",
                                     "_zero_groups")

    def __init__(self, params, defaults: Dict[str, Any], *, max_grad_norm=None, norm_type=2.0,
                 state_format=None, **options):
        if defaults.get("differentiable"):
            # torch's for-loop step records the update for autograd; optjit's, as torch's fused
            # one, does not: gradients would silently not flow through it.
            raise Error(f"{type(self).__name__}(differentiable=True): optjit's fused step is "
                        f"not differentiable (autograd does not see it); use torch.optim."
                        f"{type(self).__name__} for a differentiable step")
        for k in _IGNORED:
            defaults.pop(k, None)
        if state_format is not None:
            if not isinstance(state_format, str) or '"' in state_format:
                raise TypeError("state_format takes a string such as 'bf16' or 'exp_avg_sq:f32'")
        self._built = dict(defaults)  # what the program was written from, structure included
        self._zero_groups: Dict[str, List[bool]] = {}  # per _turned_on key, per group: was 0
        self._given = dict(defaults)  # the constructor's: a group without a key has its value
        self._pipeline_args = (state_format, max_grad_norm, norm_type)
        # torch keeps such states (NAdam's mu_product, ASGD's eta and mu) in the scalar dtype
        # of its default dtype when the state starts: f32 for float64 parameters too, unless
        # the default dtype is float64.
        self._scalars = "f64" if _scalar_dtype() == torch.float64 else "f32"
        group_defaults = dict(defaults)
        if max_grad_norm is not None:
            group_defaults["max_norm"] = max_grad_norm
        group_defaults = self._group_defaults(group_defaults)
        try:
            super().__init__(params, self._builtin_pipeline(), group_defaults, **options)
        except _optjit.Error as e:
            # The pipeline is this class's own text: its place in that text means nothing to
            # the caller, who gave keyword arguments (a value out of range, betas of three
            # numbers, an unknown state_format).
            text = re.sub(r"^pipeline: line \d+, column \d+: ", "", str(e))
            raise type(e)(f"{type(self).__name__}: {text}") from None
        self._restructure()

    def __setstate__(self, state: Dict[str, Any]) -> None:
        super().__setstate__(state)
        self.__dict__.setdefault("_zero_groups", {})  # pickled before it was kept

    def _group_defaults(self, defaults: Dict[str, Any]) -> Dict[str, Any]:
        """What a param group holds unless it says otherwise (a drop-in: its peer's keys)."""
        return {**self._group_constants, **defaults}

    def _builtin_pipeline(self) -> str:
        _, max_grad_norm, norm_type = self._pipeline_args
        return _with_clip(self._unfused_pipeline(), max_grad_norm, norm_type)

    def _restructure(self) -> None:
        """The booleans that choose the program's structure (amsgrad, nesterov, maximize, ...)
        as the param groups hold them now: a loaded torch checkpoint brings its own, which
        torch's optimizer would follow, so the program is rewritten (and recompiled) to follow
        them too. They must agree across the groups: one program steps them all."""
        changed = False
        for k in self._structural:
            values = {g.get(k, self._given[k]) for g in self.param_groups}
            if len(values) > 1:
                raise Error(f"optjit: '{k}' chooses the program's structure and must be the "
                            f"same in every parameter group (they hold {sorted(values)})")
            if (v := values.pop()) != self._built[k]:
                self._built[k] = v
                changed = True
        if changed:
            # The program's other values as the first group holds them now (the groups' values
            # are what steps use; these only have to make a valid program with the new
            # structure: nesterov wants the loaded momentum, not the constructor's 0).
            first = self.param_groups[0]
            for k in self._built:
                if k not in self._structural and k in first:
                    self._built[k] = first[k]
        restart = False
        zero_groups = self._zero_groups
        for k, starts in self._turned_on.items():
            values = [g.get(k, self._given[k]) for g in self.param_groups]
            was_zero = zero_groups.get(k, [])
            zero_groups[k] = [not v for v in values]
            if not any(values):
                continue
            built_without = not self._built[k]
            if built_without:
                # Built with k = 0 (no momentum buffer, nothing to set it in), but a group holds
                # another value now (set by hand, by CyclicLR's or OneCycleLR's momentum cycle,
                # a loaded checkpoint): the program with that part, or the step would silently
                # go on without it. (With the part, groups whose value is 0 step without it.)
                self._built[k] = next(v for v in values if v)
                changed = True
            if starts is None:
                continue
            # torch starts the buffer at the first step that finds none, the program at a
            # parameter's first step: a parameter of a group turned on without a buffer of its
            # own counts its steps from 0 again. (Turned on now, a group's parameters hold the
            # zeros the program gave them while it was 0, or none before it had the part;
            # nonzero values are a buffer of an earlier time it was on, which torch goes on
            # from.)
            for i, (g, v) in enumerate(zip(self.param_groups, values)):
                if v and (built_without or (i < len(was_zero) and was_zero[i])):
                    for p in g["params"]:
                        restart = _restart_without_buffer(self.state.get(p), starts) or restart
        if changed:
            self._rewrite()
        elif restart:
            self._forget()  # the engines adopt the restarted parameters at the next step

    def _rewrite(self) -> None:
        """The program again from what it is written from (_built, _pipeline_args); the
        engines are rebuilt at the next step and adopt the state."""
        _optjit.plan(self._builtin_pipeline(), "f32")  # (an impossible combination: an error)
        self._compose()

    def _source(self) -> str:
        return self._builtin_pipeline()

    def _before_step(self) -> None:
        self._restructure()

    def _hyper_groups(self) -> List[Dict[str, Any]]:
        groups = super()._hyper_groups()
        if not self._none_is_zero:
            return groups
        return [dict(g, **{k: 0.0 for k in self._none_is_zero if k in g and g[k] is None})
                for g in groups]

    def _unfused_pipeline(self) -> Optional[str]:
        state_format = self._pipeline_args[0]
        def value(k: str, v: Any) -> Any:
            # (A structural flag given as 1 or 0, as torch takes it, is written true or false.)
            if k in self._structural:
                return bool(v)
            return 0.0 if v is None and k in self._none_is_zero else v

        args = ", ".join(f"{k}={_number(value(k, v), k)}" for k, v in self._built.items())
        if state_format is not None:
            args += f', state_format="{state_format}"'
        if self._torch_scalars and hasattr(self, "_scalars"):  # (pickled before it was kept)
            args += f', scalar_dtype="{self._scalars}"'
        return f"{self._name}({args})"

    def _unfused_clip(self) -> Optional[Tuple[float, float]]:
        _, max_grad_norm, norm_type = self._pipeline_args
        if max_grad_norm is None:
            return None
        return float(self.param_groups[0].get("max_norm", max_grad_norm)), norm_type


def _builtin(name: str, torch_name: str, signature: Dict[str, Any], structural=(),
             sparse_grads=False, group_constants: Optional[Dict[str, Any]] = None,
             none_is_zero: Tuple[str, ...] = (), torch_scalars: bool = False,
             turned_on: Optional[Dict[str, Optional[str]]] = None):
    def __init__(self, params, *args, max_grad_norm=None, norm_type=2.0, state_format=None,
                 backend="auto", cache=True, device_step=None, cuda_graph=False,
                 param_rounding="nearest", process_group=None, shard_order="by_tensor",
                 **kwargs):
        values = dict(signature)
        for k, v in zip(signature, args):
            values[k] = v
        for k, v in kwargs.items():
            if k not in signature and k not in _IGNORED:
                raise TypeError(f"{type(self).__name__}() got an unexpected keyword argument '{k}'")
            values[k] = v
        _Builtin.__init__(self, params, values, max_grad_norm=max_grad_norm, norm_type=norm_type,
                          state_format=state_format, backend=backend, cache=cache,
                          device_step=device_step, cuda_graph=cuda_graph,
                          param_rounding=param_rounding,
                          process_group=process_group, shard_order=shard_order)

    doc = (f"optjit's fused {torch_name}: the same signature, defaults and results; "
           f"``max_grad_norm=`` fuses gradient clipping into the step; ``state_format=`` "
           f"stores the state in bf16 or f16 ('bf16', or per state: 'exp_avg_sq:f32').")
    # (group_constants: keys torch's groups hold that the signature does not take, such as
    # AdamW's decoupled_weight_decay=True, torch.optim.AdamW being an Adam)
    return type(name, (_Builtin,), {"__init__": __init__, "__doc__": doc, "_name": name.lower(),
                                     "_structural": tuple(structural),
                                     "_none_is_zero": tuple(none_is_zero),
                                     "_sparse_grads": sparse_grads,
                                     "_torch_scalars": torch_scalars,
                                     "_turned_on": dict(turned_on or {}),
                                     "_group_constants": dict(group_constants or {})})


SGD = _builtin("SGD", "torch.optim.SGD", {"lr": 1e-3, "momentum": 0.0, "dampening": 0.0,
                                          "weight_decay": 0.0, "nesterov": False,
                                          "maximize": False}, ("nesterov", "maximize"),
               sparse_grads=True, turned_on={"momentum": "momentum_buffer"})
Adam = _builtin("Adam", "torch.optim.Adam", {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8,
                                             "weight_decay": 0.0, "amsgrad": False,
                                             "maximize": False,
                                             "decoupled_weight_decay": False},
                ("amsgrad", "maximize", "decoupled_weight_decay"))
AdamW = _builtin("AdamW", "torch.optim.AdamW", {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8,
                                                "weight_decay": 1e-2, "amsgrad": False,
                                                "maximize": False}, ("amsgrad", "maximize"),
                 group_constants={"decoupled_weight_decay": True})
Adamax = _builtin("Adamax", "torch.optim.Adamax", {"lr": 2e-3, "betas": (0.9, 0.999),
                                                   "eps": 1e-8, "weight_decay": 0.0,
                                                   "maximize": False}, ("maximize",))
NAdam = _builtin("NAdam", "torch.optim.NAdam", {"lr": 2e-3, "betas": (0.9, 0.999), "eps": 1e-8,
                                                "weight_decay": 0.0, "momentum_decay": 4e-3,
                                                "decoupled_weight_decay": False,
                                                "maximize": False},
                 ("decoupled_weight_decay", "maximize"), torch_scalars=True)
RAdam = _builtin("RAdam", "torch.optim.RAdam", {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8,
                                                "weight_decay": 0.0,
                                                "decoupled_weight_decay": False,
                                                "maximize": False},
                 ("decoupled_weight_decay", "maximize"))
RMSprop = _builtin("RMSprop", "torch.optim.RMSprop", {"lr": 1e-2, "alpha": 0.99, "eps": 1e-8,
                                                      "weight_decay": 0.0, "momentum": 0.0,
                                                      "centered": False, "maximize": False},
                   ("centered", "maximize"), turned_on={"momentum": None})
Adagrad = _builtin("Adagrad", "torch.optim.Adagrad", {"lr": 1e-2, "lr_decay": 0.0,
                                                      "weight_decay": 0.0,
                                                      "initial_accumulator_value": 0.0,
                                                      "eps": 1e-10, "maximize": False},
                   ("maximize",), sparse_grads=True)
Adadelta = _builtin("Adadelta", "torch.optim.Adadelta", {"lr": 1.0, "rho": 0.9, "eps": 1e-6,
                                                         "weight_decay": 0.0, "maximize": False},
                    ("maximize",))
Rprop = _builtin("Rprop", "torch.optim.Rprop", {"lr": 1e-2, "etas": (0.5, 1.2),
                                                "step_sizes": (1e-6, 50.0), "maximize": False},
                 ("maximize",))
ASGD = _builtin("ASGD", "torch.optim.ASGD", {"lr": 1e-2, "lambd": 1e-4, "alpha": 0.75,
                                             "t0": 1e6, "weight_decay": 0.0, "maximize": False},
                ("maximize",), torch_scalars=True)
Lion = _builtin("Lion", "lion_pytorch.Lion", {"lr": 1e-4, "betas": (0.9, 0.99),
                                              "weight_decay": 0.0})
LAMB = _builtin("LAMB", "torch_optimizer.Lamb", {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-6,
                                                 "weight_decay": 0.0, "clamp_value": 10.0,
                                                 "adam": False, "debias": False},
                ("adam", "debias"))
AdEMAMix = _builtin("AdEMAMix", "bitsandbytes.optim.AdEMAMix",
                    {"lr": 1e-3, "betas": (0.9, 0.999, 0.9999), "alpha": 5.0, "t_alpha": None,
                     "t_beta3": None, "eps": 1e-8, "weight_decay": 1e-2},
                    none_is_zero=("t_alpha", "t_beta3"))

# The built-ins' own keywords (state_format aside), which the drop-ins for other packages'
# classes pass through (_peer_arguments).
_OPTJIT_KEYWORDS = tuple(k for k, p in inspect.signature(AdamW.__init__).parameters.items()
                         if p.kind is p.KEYWORD_ONLY and k != "state_format")

# torch.optim's optimizers that optjit's built-ins are.
_TORCH_OPTIMIZERS = ("SGD", "Adam", "AdamW", "Adamax", "NAdam", "RAdam", "RMSprop", "Adagrad",
                     "Adadelta", "Rprop", "ASGD")


def install(defer_clip: bool = True) -> Installed:
    """optjit's built-ins in place of torch.optim's own (SGD, Adam, AdamW, Adamax, NAdam, RAdam,
    RMSprop, Adagrad, Adadelta, Rprop, ASGD) in torch's modules, for code that makes the
    optimizer itself (a trainer given ``optim="adamw_torch"`` makes ``torch.optim.AdamW``)::

        optjit.torch.install()              # or: with optjit.torch.install(): ...

    They take torch's arguments and give torch's results (``foreach``, ``fused`` and
    ``capturable`` are accepted and mean nothing here: optjit's step is fused);
    ``differentiable=True`` is refused. With ``defer_clip`` (the default),
    ``torch.nn.utils.clip_grad_norm_`` is :func:`clip_grad_norm_`: the norm is torch's, and the
    gradients are scaled inside the optimizer's fused step instead of a pass of their own.
    Code that found torch's classes before (``from torch.optim import AdamW`` already run)
    keeps them. The returned handle's ``uninstall()`` (or leaving the ``with`` block) puts
    torch's back."""
    return _install("torch", {n: globals()[n] for n in _TORCH_OPTIMIZERS}, defer_clip)


# torch.optim's optimizers that optjit has no fused step for, and why: `optjit.torch.X` is
# torch's own (with a warning), so code whose one changed line is `import optjit.torch as optim`
# keeps running.
_TORCH_ONLY = {
    "Adafactor": "its factored second moment is a mean over each row and each column of a "
                 "matrix, a reduction optjit's IR does not have",
    "LBFGS": "its step is a line search that evaluates the closure many times, not one pass "
             "over memory",
    "SparseAdam": "it steps only the rows a sparse gradient holds",
    "Muon": "its update orthogonalizes each matrix by Newton-Schulz iterations (matrix "
            "products), not an elementwise step",
}


def __getattr__(name: str) -> Any:
    # torch.optim's submodules and its optimizers that optjit leaves to torch (PEP 562: also
    # what `from optjit.torch import X` finds).
    if name in ("lr_scheduler", "swa_utils"):
        return getattr(torch.optim, name)
    if name in _TORCH_ONLY and hasattr(torch.optim, name):
        warnings.warn(f"optjit.torch.{name} is torch.optim.{name} itself, unfused: "
                      f"{_TORCH_ONLY[name]}", stacklevel=2)
        return getattr(torch.optim, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Optimizer", "Error", "SGD", "Adam", "AdamW", "Adamax", "NAdam", "RAdam", "RMSprop",
           "Adagrad", "Adadelta", "Rprop", "ASGD", "Lion", "LAMB", "AdEMAMix", "install",
           "clip_grad_norm_"]
