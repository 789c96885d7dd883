"""bitsandbytes' optimizers (``bitsandbytes.optim``) as optjit's fused steps, by one import line::

    import optjit.bitsandbytes as bnb                    # was: import bitsandbytes as bnb
    opt = bnb.optim.AdamW8bit(model.parameters(), lr=1e-3)
    # or: from optjit.bitsandbytes.optim import AdamW8bit
    # or, where a library makes it (transformers' Trainer, optim="adamw_bnb_8bit"):
    #     optjit.bitsandbytes.install()

The classes have bitsandbytes' names, signatures and defaults, and step as bitsandbytes does on
the CPU: its blockwise 8-bit states (dynamic maps, 256-element blocks, f32 absmax), codes and
scales bit for bit where its own step is deterministic (python/tests/test_dropins.py measures
the rest), in one fused multi-tensor pass instead of a launch per tensor. What
bitsandbytes decides per parameter, these decide the same way when the parameter first steps:

- 8-bit state where the optimizer's ``optim_bits`` (8 for the ``*8bit`` classes) says so and
  the parameter has at least ``min_8bit_size`` elements; 32-bit (f32) state otherwise;
- ``GlobalOptimManager`` overrides of ``optim_bits`` and ``min_8bit_size`` per parameter, from
  this module's manager and, where the program imported bitsandbytes, from bitsandbytes' own
  (``bitsandbytes.nn.StableEmbedding`` registers its weight there for 32-bit state);
- weight decay as bitsandbytes applies it: decoupled for Adam and AdamW alike (its ``Adam8bit``
  is AdamW with ``weight_decay=0`` by default) and Lion; added to the gradient for SGD,
  RMSprop and Adagrad.

Where bitsandbytes raises, these raise the same exception. Where bitsandbytes silently ignores
an argument (``amsgrad`` of its 32-bit Adam, SGD's ``dampening`` and ``nesterov``, RMSprop's
``momentum``), these refuse it with an ``optjit.Error`` that says so, rather than step
differently from what the argument asks. ``is_paged`` is accepted: optjit keeps state in the
device's own memory (bitsandbytes pages it to the host under memory pressure; on the CPU it
ignores the flag too).

Checkpoints and param groups are bitsandbytes' own, so a run moves either way between the two
by its checkpoint: ``param_groups`` hold bitsandbytes' keys and values (SGD's momentum and
RMSprop's alpha are ``betas[0]`` there, and a scheduler or script that sets them there is
followed); ``state_dict()`` is bitsandbytes' layout (per parameter an int ``step`` and, under
``__bnb_optimizer_quant_state__``, ``state1``/``state2`` with ``absmax``/``qmap`` for 8-bit
state), which bitsandbytes' class loads and steps on; ``load_state_dict`` takes bitsandbytes'
and optjit.torch's. ``optimizer.state[p]`` keeps optjit's names (``exp_avg`` and its
``exp_avg.absmax``, as ``optjit.torch``).
optjit's own keywords pass through: ``max_grad_norm=`` fuses gradient clipping into the step,
``backend=``, ``cuda_graph=`` and the rest as in ``optjit.torch``.

``AdEMAMix`` (and its 8-bit, 32-bit and paged forms) steps as bitsandbytes' CPU kernels do:
its fast and slow averages are ``exp_avg`` and ``exp_avg_slow`` in ``optimizer.state[p]``,
stacked as bitsandbytes' ``state1`` (shape ``(2, *p.shape)``, ``absmax1`` ``(2, blocks)``) in
``state_dict()``; ``t_alpha`` and ``t_beta3`` warm alpha and beta3 up as bitsandbytes' do.
bitsandbytes' own ``AdEMAMix32bit`` (and ``PagedAdEMAMix32bit``) cannot step on the CPU (its
state1 is not stacked: bitsandbytes 0.50.2 fails on a shape mismatch); these step as
``AdEMAMix(optim_bits=32)``.

bitsandbytes' LAMB and LARS are not here: ``optjit.torch.LAMB`` is torch_optimizer's LAMB
(``state_format="8bit"`` for 8-bit state).
"""

import sys
import types
from typing import Any, Dict, Iterator, Optional, Tuple

import torch

from . import torch as _ot
from ._optjit import Error


class GlobalOptimManager:
    """bitsandbytes' per-parameter configuration overrides, with its interface::

        mng = optjit.bitsandbytes.optim.GlobalOptimManager.get_instance()
        mng.register_parameters(model.parameters())
        mng.override_config(model.fc1.weight, "optim_bits", 32)

    Read when a parameter first steps, as bitsandbytes reads it. optjit steps the
    hyperparameters of param groups, so an override of ``lr``, ``betas``, ``eps`` or
    ``weight_decay`` that differs from its group's is an error that says to give the parameter
    a group of its own."""

    _instance: Optional["GlobalOptimManager"] = None

    def __init__(self):
        raise RuntimeError("Call get_instance() instead")

    def initialize(self) -> None:
        self.pid2config: Dict[int, Dict[str, Any]] = {}
        self.index2config: Dict[Tuple[int, int], Dict[str, Any]] = {}
        self.optimizer = None
        self.uses_config_override = False
        self.module_weight_config_triple = []

    @classmethod
    def get_instance(cls) -> "GlobalOptimManager":
        if cls._instance is None:
            cls._instance = cls.__new__(cls)
            cls._instance.initialize()
        return cls._instance

    def register_parameters(self, params) -> None:
        """Keys the overrides given so far by (group, index) too, as bitsandbytes does."""
        groups = list(params)
        if groups and not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for g, group in enumerate(groups):
            for i, p in enumerate(group["params"]):
                if id(p) in self.pid2config:
                    self.index2config[(g, i)] = self.pid2config[id(p)]

    def override_config(self, parameters, key=None, value=None, key_value_dict=None) -> None:
        self.uses_config_override = True
        if isinstance(parameters, torch.Tensor):
            parameters = [parameters]
        if key is not None and value is not None:
            if key_value_dict is not None:
                raise ValueError("override_config takes key and value, or key_value_dict")
            key_value_dict = {key: value}
        for p in parameters if key_value_dict is not None else ():
            self.pid2config.setdefault(id(p), {}).update(key_value_dict)

    def register_module_override(self, module, param_name: str, config: Dict[str, Any]) -> None:
        self.module_weight_config_triple.append((module, param_name, config))


def _managers() -> Iterator[Any]:
    """This module's manager, then bitsandbytes' own where the program imported bitsandbytes
    (not imported here: it is slow to import, and its overrides exist only if it was)."""
    yield GlobalOptimManager.get_instance()
    theirs = sys.modules.get("bitsandbytes.optim")
    if theirs is not None and hasattr(theirs, "GlobalOptimManager"):
        yield theirs.GlobalOptimManager.get_instance()


# Override keys that are hyperparameters of param groups, and the rest with the only values
# optjit steps as bitsandbytes does.
_HYPER_KEYS = ("lr", "betas", "eps", "weight_decay")
_FIXED_KEYS = {"max_unorm": 0.0, "skip_zeros": False, "alpha": 0.0, "t_alpha": None,
               "t_beta3": None}


class _Bitsandbytes:
    """What the classes below share: the state's bits per parameter, decided as bitsandbytes
    decides them when the parameter first steps (see the module's text)."""

    _pickled = _ot._Builtin._pickled + ("_optim_bits", "_min_8bit_size", "_bnb_defaults")
    # Keys of _FIXED_KEYS that are this optimizer's hyperparameters (AdEMAMix's alpha, ...).
    _hypers_of_its_own: Tuple[str, ...] = ()

    def _overrides(self, g: int, i: int, p: torch.Tensor) -> Dict[str, Any]:
        config: Dict[str, Any] = {}
        for mng in _managers():
            for module, attr, c in mng.module_weight_config_triple:
                if getattr(module, attr, None) is p:
                    config.update(c)
            config.update(mng.index2config.get((g, i), {}))
            config.update(mng.pid2config.get(id(p), {}))
        group = self.param_groups[g]
        for k, v in config.items():
            if k in ("optim_bits", "min_8bit_size"):
                continue
            if k in _FIXED_KEYS and k not in self._hypers_of_its_own:
                if _same(v, _FIXED_KEYS[k]):
                    continue
            elif k in _HYPER_KEYS or k in group:
                if k in group and _same(v, group[k]):
                    continue
                raise Error(f"GlobalOptimManager overrides {k}={v!r} for parameter {i} of param "
                            f"group {g}: optjit steps the hyperparameters of param groups; give "
                            f"the parameter a param group of its own with {k}={v!r}")
            raise Error(f"GlobalOptimManager overrides {k}={v!r} for parameter {i} of param group "
                        f"{g}: optjit's {type(self).__name__} does not take {k}")
        return config

    def _decide(self, g: int, i: int, p: torch.Tensor) -> bool:
        # State it already has (a loaded checkpoint, an earlier step): as it is, as bitsandbytes
        # keeps loaded state.
        st = self.state.get(p, {})
        held = [st[n] for n in _flat(self._BNB_STATES[self._name])
                if isinstance(st.get(n), torch.Tensor)]
        if held:
            return held[0].dtype == torch.uint8
        config = self._overrides(g, i, p)
        bits = config.get("optim_bits", self._optim_bits)
        if bits not in (8, 32):
            raise NotImplementedError(f"Amount of optimizer bits not supported: {bits}")
        return bits == 8 and p.numel() >= config.get("min_8bit_size", self._min_8bit_size)

    def _state_quantized(self, p: torch.Tensor, group: Dict[str, Any]) -> Optional[bool]:
        decided = self.__dict__.setdefault("_decided", {})
        if id(p) not in decided:  # (a parameter put in place of another in a group's list)
            g = next(k for k, gr in enumerate(self.param_groups) if gr is group)
            decided[id(p)] = self._decide(g, next(i for i, q in enumerate(group["params"])
                                                  if q is p), p)
        return decided[id(p)]

    def _before_step(self) -> None:
        super()._before_step()
        # Only when the groups gained or lost parameters: this runs before every step, and a
        # pass over 10,000 parameters took 2 ms.
        sizes = [len(group["params"]) for group in self.param_groups]
        if sizes == self.__dict__.get("_decided_sizes"):
            return
        decided = self.__dict__.setdefault("_decided", {})
        for g, group in enumerate(self.param_groups):
            for i, p in enumerate(group["params"]):
                if id(p) not in decided:
                    decided[id(p)] = self._decide(g, i, p)
        self._decided_sizes = sizes
        # One program steps them all: 8-bit where any parameter is (the others keep f32 state
        # in it, as small tensors do), else plain f32 state.
        fmt = "8bit" if any(decided.get(id(p)) for p in self._params()) else "f32"
        if fmt != self._pipeline_args[0]:
            self._pipeline_args = (fmt,) + tuple(self._pipeline_args[1:])
            self._rewrite()

    # The built-ins with bitsandbytes' own floating-point operations (peer="bitsandbytes_8bit"
    # or "_32bit"): its CPU kernels compute Adam's first moment as mul_ and add_, not torch's
    # lerp, and its 32-bit kernels step Adam, RMSprop and Adagrad by another formula, also the
    # small tensors of an 8-bit optimizer (under min_8bit_size, 32-bit state). One program
    # steps every parameter: "bitsandbytes_8bit" picks the formula per tensor (holds_codes).
    _PEER_FORMULAS = ("adamw", "rmsprop", "adagrad")

    def _unfused_pipeline(self) -> Optional[str]:
        text = super()._unfused_pipeline()
        if self._name not in self._PEER_FORMULAS:
            return text
        bits = "8bit" if self._pipeline_args[0] == "8bit" else "32bit"
        return f'{text[:-1]}, peer="bitsandbytes_{bits}")'

    # The param groups are bitsandbytes' (its keys and values: SGD's momentum and RMSprop's
    # alpha are betas[0]), and so is the state dict; optimizer.state[p] keeps optjit's names.

    def _group_defaults(self, defaults: Dict[str, Any]) -> Dict[str, Any]:
        clip = {"max_norm": defaults["max_norm"]} if "max_norm" in defaults else {}
        return dict(self._bnb_defaults, **clip)

    def _hyper_groups(self):
        names = _ot.Optimizer._BNB_BETAS.get(self._name)
        if names is None:
            return super()._hyper_groups()
        out = []
        for g, group in enumerate(self.param_groups):
            betas = group.get("betas")
            if not isinstance(betas, (tuple, list)) or len(betas) != 2:
                raise Error(f"param_groups[{g}]['betas'] is {betas!r}: {type(self).__name__} "
                            f"takes ({names[0]}, {names[1]}) there, as bitsandbytes' does")
            if not _same(betas[1], 0):
                raise Error(f"param_groups[{g}]['betas'] is {tuple(betas)!r}: its second value "
                            f"is {names[1]}, which bitsandbytes' {type(self).__name__} ignores; "
                            f"optjit refuses it rather than step otherwise than asked")
            out.append(dict(group, **{names[0]: betas[0], names[1]: 0.0}))
        return out

    def _own_group(self, group: Dict[str, Any]) -> Dict[str, Any]:
        """A loaded group in bitsandbytes' keys: bitsandbytes' own as they are; optjit.torch's
        (and this module's before its groups were bitsandbytes'), translated."""
        names = _ot.Optimizer._BNB_BETAS.get(self._name)
        if names is not None and "betas" not in group and names[0] in group:
            group = dict(group)
            group["betas"] = (group.pop(names[0]), group.pop(names[1], 0))
        for k, v in self._bnb_defaults.items():
            if k not in group and k != "betas":  # (adagrad's: what bitsandbytes keeps)
                group = dict(group, **{k: v})
        group.setdefault("betas", self._bnb_defaults["betas"])
        return group

    def state_dict(self) -> Dict[str, Any]:
        """bitsandbytes' state dict: per parameter its step (an int) and, under
        "__bnb_optimizer_quant_state__", state1 (and state2) as codes with absmax1 and qmap1
        (8-bit) or as f32 values, so that bitsandbytes' class loads it and steps on."""
        sd = super().state_dict()
        names = self._BNB_STATES[self._name]
        sd["state"] = {pid: _to_bitsandbytes(st, names) if isinstance(st, dict) else st
                       for pid, st in sd["state"].items()}
        return sd


def _to_bitsandbytes(st: Dict[str, Any], names: Tuple[str, ...]) -> Dict[str, Any]:
    """One parameter's state from optjit's names into bitsandbytes' (state1, absmax1, qmap1,
    ...; the step as an int). The codes are bitsandbytes' as they are: the same maps and
    256-element blocks."""
    st = dict(st)
    quant: Dict[str, Any] = {}
    for j, entry in enumerate(names, start=1):
        stacked = entry if isinstance(entry, tuple) else (entry,)
        parts = [(name, st.pop(name, None), st.pop(name + ".absmax", None),
                  st.pop(name + ".format", None), st.pop(name + ".strides", None))
                 for name in stacked]  # (8-bit codes keep the parameter's shape and order)
        if any(t is None for _, t, _, _, _ in parts):
            continue
        if len({t.dtype for _, t, _, _, _ in parts}) > 1:
            raise Error(f"states {' and '.join(stacked)} are one tensor in bitsandbytes' state "
                        f"dict, so they need one format; they hold "
                        f"{' and '.join(str(t.dtype) for _, t, _, _, _ in parts)}")
        for name, t, absmax, fmt, _ in parts:
            if t.dtype == torch.uint8:
                if not isinstance(absmax, torch.Tensor):
                    raise Error(f"state '{name}' holds codes without their scales "
                                f"('{name}.absmax')")
                if fmt not in ("q8", "q8u") or fmt != parts[0][3]:
                    one = f", one for {' and '.join(stacked)}" if len(parts) > 1 else ""
                    raise Error(f"state '{name}' holds codes of format {fmt!r}, which "
                                f"bitsandbytes' state dict cannot hold (its 8-bit maps are q8 "
                                f"and q8u{one})")
        _, t, absmax, fmt, _ = parts[0]
        if len(parts) > 1:  # (AdEMAMix's state1: its averages stacked, (2, *shape))
            t = torch.stack([part[1] for part in parts])
            absmax = (torch.stack([part[2] for part in parts]) if t.dtype == torch.uint8
                      else None)
        quant[f"state{j}"] = t
        if t.dtype == torch.uint8:
            quant[f"absmax{j}"] = absmax
            quant[f"qmap{j}"] = torch.tensor(_ot._optjit.quant_map(fmt), dtype=torch.float32,
                                             device=t.device)
    out: Dict[str, Any] = {}
    if "step" in st:
        step = st.pop("step")
        out["step"] = int(step.item()) if isinstance(step, torch.Tensor) else int(step)
    out.update(st)
    if quant:
        out["__bnb_optimizer_quant_state__"] = quant
    return out


def _flat(names: Tuple[Any, ...]) -> Tuple[str, ...]:
    """bitsandbytes' states by optjit name, stacked ones (a tuple) unpacked."""
    return tuple(n for entry in names for n in (entry if isinstance(entry, tuple) else (entry,)))


def _same(a: Any, b: Any) -> bool:
    """Whether two configuration values are equal: numbers by value (0 == 0.0, a tensor's
    value), tuples and lists item by item."""
    seq = (tuple, list)
    if isinstance(a, seq) or isinstance(b, seq):
        a = tuple(a) if isinstance(a, seq) else (a,)
        b = tuple(b) if isinstance(b, seq) else (b,)
        return len(a) == len(b) and all(map(_same, a, b))
    if a is None or b is None:
        return a is b
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return a == b


def _adam(name: str, v: Dict[str, Any]) -> Dict[str, Any]:
    if "8bit" in name and v["optim_bits"] != 32:
        raise ValueError(f"{name} only supports optim_bits=32 (default value for compatibility)")
    if v["amsgrad"]:
        if "8bit" in name:
            raise ValueError(f"{name} does not support amsgrad=True")
        raise Error(f"{name}(amsgrad=True): bitsandbytes' {name} ignores amsgrad and steps Adam; "
                    f"optjit refuses it rather than step otherwise than asked (optjit.torch."
                    f"AdamW(amsgrad=True, state_format='8bit') is AMSGrad with 8-bit state)")
    return dict(lr=v["lr"], betas=v["betas"], eps=v["eps"], weight_decay=v["weight_decay"])


def _ademamix(name: str, v: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v[k] for k in ("lr", "betas", "alpha", "t_alpha", "t_beta3", "eps",
                              "weight_decay")}


def _lion(name: str, v: Dict[str, Any]) -> Dict[str, Any]:
    return dict(lr=v["lr"], betas=v["betas"], weight_decay=v["weight_decay"])


def _rmsprop(name: str, v: Dict[str, Any]) -> Dict[str, Any]:
    if v["alpha"] == 0:
        raise NotImplementedError("RMSprop with alpha==0.0 is not supported!")
    if v["centered"]:
        raise NotImplementedError("Centered RMSprop is not supported!")
    if v["momentum"] != 0:
        raise Error(f"{name}(momentum={v['momentum']!r}): bitsandbytes' RMSprop ignores momentum; "
                    f"optjit refuses it rather than step otherwise than asked (optjit.torch."
                    f"RMSprop(momentum=..., state_format='8bit') is torch's with 8-bit state)")
    return dict(lr=v["lr"], alpha=v["alpha"], eps=v["eps"], weight_decay=v["weight_decay"])


def _sgd(name: str, v: Dict[str, Any]) -> Dict[str, Any]:
    if v["momentum"] == 0:
        raise NotImplementedError("SGD without momentum is not supported!")
    for k in ("dampening", "nesterov"):
        if v[k]:
            raise Error(f"{name}({k}={v[k]!r}): bitsandbytes' SGD ignores {k}; optjit refuses it "
                        f"rather than step otherwise than asked (optjit.torch.SGD({k}=..., "
                        f"state_format='8bit') is torch's with 8-bit state)")
    return dict(lr=v["lr"], momentum=v["momentum"], weight_decay=v["weight_decay"])


def _adagrad(name: str, v: Dict[str, Any]) -> Dict[str, Any]:
    if v["initial_accumulator_value"] != 0.0:
        raise ValueError("Initial accumulator value != 0.0 not supported!")
    if v["lr_decay"] != 0.0:
        raise ValueError("Lr Decay != 0.0 not supported!")
    if name == "Adagrad8bit" and v["optim_bits"] != 8:
        raise ValueError("Adagrad8bit only supports optim_bits=8 (default value for compatibility)")
    return dict(lr=v["lr"], eps=v["eps"], weight_decay=v["weight_decay"])


def _bnb_group(kind: str, v: Dict[str, Any]) -> Dict[str, Any]:
    """The param group defaults bitsandbytes' class keeps for arguments `v` (its names: SGD's
    momentum and RMSprop's alpha are betas[0]), by optjit built-in."""
    lr, wd = v["lr"], v["weight_decay"]
    if kind == "adamw":
        return dict(lr=lr, betas=v["betas"], eps=v["eps"], weight_decay=wd, alpha=0.0,
                    t_alpha=None, t_beta3=None)
    if kind == "ademamix":
        return dict(lr=lr, betas=v["betas"], eps=v["eps"], weight_decay=wd, alpha=v["alpha"],
                    t_alpha=v["t_alpha"], t_beta3=v["t_beta3"])
    if kind == "lion":
        return dict(lr=lr, betas=v["betas"], eps=0.0, weight_decay=wd)
    if kind == "sgd":
        return dict(lr=lr, betas=(v["momentum"], v["dampening"]), eps=0.0, weight_decay=wd)
    if kind == "rmsprop":
        return dict(lr=lr, betas=(v["alpha"], v["momentum"]), eps=v["eps"], weight_decay=wd)
    return dict(lr=lr, betas=(0.0, 0.0), eps=v["eps"], weight_decay=wd)  # adagrad


def _make(name: str, base: type, hypers, signature: Dict[str, Any], bits: Optional[int],
          what: str) -> type:
    """A bitsandbytes class: `signature` its parameters after `params`, in order, with their
    defaults; `bits` the state's bits it fixes (None: its optim_bits argument's)."""

    def __init__(self, params, *args, **kwargs):
        v, extra = _ot._peer_arguments(name, signature, args, kwargs)
        if isinstance(v.get("betas"), str):  # "(0.9, 0.999)", as bitsandbytes parses it
            v["betas"] = [float(b) for b in v["betas"].replace("(", "").replace(")", "")
                          .strip().split(",")]
        optim_bits = bits if bits is not None else v.get("optim_bits", 32)
        min_8bit_size = v["min_8bit_size"]
        args_ = v.get("args")
        if args_ is not None:  # bitsandbytes' args object takes precedence, as there
            optim_bits = getattr(args_, "optim_bits", optim_bits)
            min_8bit_size = getattr(args_, "min_8bit_size", min_8bit_size)
            for k, d in _FIXED_KEYS.items():
                if hasattr(args_, k) and not _same(getattr(args_, k), d):
                    raise Error(f"{name}: args.{k}={getattr(args_, k)!r} is not supported")
        if optim_bits not in (8, 32):
            raise NotImplementedError(f"Amount of optimizer bits not supported: {optim_bits}")
        self._optim_bits, self._min_8bit_size = optim_bits, min_8bit_size
        self._bnb_defaults = _bnb_group(base._name, v)
        base.__init__(self, params, **hypers(name, v),
                      state_format="8bit" if optim_bits == 8 else "f32", **extra)

    __init__.__signature__ = _ot._peer_signature(signature)
    doc = (f"bitsandbytes.optim.{name} as optjit's fused step: {what} (bitsandbytes' signature "
           f"and defaults; see optjit.bitsandbytes)")
    own = tuple(k for k in _FIXED_KEYS if k in signature)
    return type(name, (_Bitsandbytes, base), {"__init__": __init__, "__doc__": doc,
                                              "__module__": __name__,
                                              "_hypers_of_its_own": own})


def _signature(first: Dict[str, Any], optim_bits: Optional[int], is_paged: bool = False):
    """A class's parameters after `params`: its optimizer's own, then (where the class has
    them) optim_bits, then args and min_8bit_size, then is_paged."""
    s = dict(first)
    if optim_bits is not None:
        s["optim_bits"] = optim_bits
    s.update(args=None, min_8bit_size=4096)
    if is_paged:
        s["is_paged"] = False
    return s


def _adam_signature(weight_decay: float, is_paged: bool = True):
    return _signature(dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=weight_decay,
                           amsgrad=False), 32, is_paged)


def _lion_signature(optim_bits: bool, is_paged: bool = True):
    return _signature(dict(lr=1e-4, betas=(0.9, 0.99), weight_decay=0),
                      32 if optim_bits else None, is_paged)


def _ademamix_signature(optim_bits: bool, is_paged: bool):
    """AdEMAMix's classes take no args object, unlike bitsandbytes' others."""
    s = dict(lr=1e-3, betas=(0.9, 0.999, 0.9999), alpha=5.0, t_alpha=None, t_beta3=None,
             eps=1e-8, weight_decay=1e-2)
    if optim_bits:
        s["optim_bits"] = 32
    s["min_8bit_size"] = 4096
    if is_paged:
        s["is_paged"] = False
    return s


_RMSPROP = dict(lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0, centered=False)
_SGD = dict(lr=_ot._REQUIRED, momentum=0, dampening=0, weight_decay=0, nesterov=False)
_ADAGRAD = dict(lr=1e-2, lr_decay=0, weight_decay=0, initial_accumulator_value=0, eps=1e-10)

_ADAM = "Adam with decoupled weight decay, as bitsandbytes' Adam"
Adam = _make("Adam", _ot.AdamW, _adam, _adam_signature(0), None, _ADAM)
Adam8bit = _make("Adam8bit", _ot.AdamW, _adam, _adam_signature(0), 8, _ADAM)
Adam32bit = _make("Adam32bit", _ot.AdamW, _adam, _adam_signature(0), 32, _ADAM)
PagedAdam = _make("PagedAdam", _ot.AdamW, _adam, _adam_signature(0), None, _ADAM)
PagedAdam8bit = _make("PagedAdam8bit", _ot.AdamW, _adam, _adam_signature(0), 8, _ADAM)
PagedAdam32bit = _make("PagedAdam32bit", _ot.AdamW, _adam, _adam_signature(0), 32, _ADAM)
AdamW = _make("AdamW", _ot.AdamW, _adam, _adam_signature(1e-2), None, "AdamW")
AdamW8bit = _make("AdamW8bit", _ot.AdamW, _adam, _adam_signature(1e-2), 8, "AdamW")
AdamW32bit = _make("AdamW32bit", _ot.AdamW, _adam, _adam_signature(1e-2), 32, "AdamW")
PagedAdamW = _make("PagedAdamW", _ot.AdamW, _adam, _adam_signature(1e-2, is_paged=False), None,
                   "AdamW")
PagedAdamW8bit = _make("PagedAdamW8bit", _ot.AdamW, _adam, _adam_signature(1e-2, is_paged=False),
                       8, "AdamW")
PagedAdamW32bit = _make("PagedAdamW32bit", _ot.AdamW, _adam,
                        _adam_signature(1e-2, is_paged=False), 32, "AdamW")
Lion = _make("Lion", _ot.Lion, _lion, _lion_signature(True), None, "Lion")
Lion8bit = _make("Lion8bit", _ot.Lion, _lion, _lion_signature(False), 8, "Lion")
Lion32bit = _make("Lion32bit", _ot.Lion, _lion, _lion_signature(False), 32, "Lion")
PagedLion = _make("PagedLion", _ot.Lion, _lion, _lion_signature(True, False), None, "Lion")
PagedLion8bit = _make("PagedLion8bit", _ot.Lion, _lion, _lion_signature(False, False), 8, "Lion")
PagedLion32bit = _make("PagedLion32bit", _ot.Lion, _lion, _lion_signature(False, False), 32,
                       "Lion")
RMSprop = _make("RMSprop", _ot.RMSprop, _rmsprop, _signature(_RMSPROP, 32), None, "RMSprop")
RMSprop8bit = _make("RMSprop8bit", _ot.RMSprop, _rmsprop, _signature(_RMSPROP, None), 8,
                    "RMSprop")
RMSprop32bit = _make("RMSprop32bit", _ot.RMSprop, _rmsprop, _signature(_RMSPROP, None), 32,
                     "RMSprop")
SGD = _make("SGD", _ot.SGD, _sgd, _signature(_SGD, 32), None, "SGD with momentum")
SGD8bit = _make("SGD8bit", _ot.SGD, _sgd, _signature(_SGD, None), 8, "SGD with momentum")
SGD32bit = _make("SGD32bit", _ot.SGD, _sgd, _signature(_SGD, None), 32, "SGD with momentum")
Adagrad = _make("Adagrad", _ot.Adagrad, _adagrad, _signature(_ADAGRAD, 32), None, "Adagrad")
Adagrad8bit = _make("Adagrad8bit", _ot.Adagrad, _adagrad, _signature(_ADAGRAD, 8), 8, "Adagrad")
Adagrad32bit = _make("Adagrad32bit", _ot.Adagrad, _adagrad, _signature(_ADAGRAD, 32), 32,
                     "Adagrad")
_ADEMAMIX = "AdEMAMix"
AdEMAMix = _make("AdEMAMix", _ot.AdEMAMix, _ademamix, _ademamix_signature(True, True), None,
                 _ADEMAMIX)
AdEMAMix8bit = _make("AdEMAMix8bit", _ot.AdEMAMix, _ademamix, _ademamix_signature(False, True),
                     8, _ADEMAMIX)
AdEMAMix32bit = _make("AdEMAMix32bit", _ot.AdEMAMix, _ademamix,
                      _ademamix_signature(False, True), 32, _ADEMAMIX)
PagedAdEMAMix = _make("PagedAdEMAMix", _ot.AdEMAMix, _ademamix,
                      _ademamix_signature(True, False), None, _ADEMAMIX)
PagedAdEMAMix8bit = _make("PagedAdEMAMix8bit", _ot.AdEMAMix, _ademamix,
                          _ademamix_signature(False, False), 8, _ADEMAMIX)
PagedAdEMAMix32bit = _make("PagedAdEMAMix32bit", _ot.AdEMAMix, _ademamix,
                           _ademamix_signature(False, False), 32, _ADEMAMIX)

__all__ = ["GlobalOptimManager", "Adam", "Adam8bit", "Adam32bit", "PagedAdam", "PagedAdam8bit",
           "PagedAdam32bit", "AdamW", "AdamW8bit", "AdamW32bit", "PagedAdamW", "PagedAdamW8bit",
           "PagedAdamW32bit", "Lion", "Lion8bit", "Lion32bit", "PagedLion", "PagedLion8bit",
           "PagedLion32bit", "RMSprop", "RMSprop8bit", "RMSprop32bit", "SGD", "SGD8bit",
           "SGD32bit", "Adagrad", "Adagrad8bit", "Adagrad32bit", "AdEMAMix", "AdEMAMix8bit",
           "AdEMAMix32bit", "PagedAdEMAMix", "PagedAdEMAMix8bit", "PagedAdEMAMix32bit"]


def install(defer_clip: bool = True) -> "_ot.Installed":
    """These classes in place of bitsandbytes' own in bitsandbytes' modules, for code that makes
    the optimizer itself (a trainer given ``optim="adamw_bnb_8bit"`` imports
    ``bitsandbytes.optim.AdamW``)::

        optjit.bitsandbytes.install()       # or: with optjit.bitsandbytes.install(): ...

    Code that found bitsandbytes' classes before (``from bitsandbytes.optim import AdamW8bit``
    already run) keeps them. LAMB and LARS stay bitsandbytes'. With ``defer_clip``
    (the default), ``torch.nn.utils.clip_grad_norm_`` is ``optjit.torch.clip_grad_norm_``: the
    gradients are scaled inside the fused step (see ``optjit.torch.install``). The returned
    handle's ``uninstall()`` (or leaving the ``with`` block) puts bitsandbytes' and torch's
    back."""
    return _ot._install("bitsandbytes", {n: globals()[n] for n in __all__[1:]}, defer_clip)


_MISSING = ("LAMB", "LARS", "PytorchLARS")


def _missing(module: str):
    def __getattr__(name: str):
        if any(name.startswith(m) or name.startswith("Paged" + m) for m in _MISSING):
            raise AttributeError(
                f"{module} has no {name}: bitsandbytes' LAMB and LARS are not among "
                f"optjit's built-ins (optjit.torch.LAMB is torch_optimizer's LAMB; with "
                f"state_format='8bit' its state is 8-bit)")
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    return __getattr__


__getattr__ = _missing(__name__)


# `bnb.optim.AdamW8bit` and `from optjit.bitsandbytes.optim import AdamW8bit`, as bitsandbytes
# spells them.
optim = types.ModuleType(__name__ + ".optim",
                         "bitsandbytes.optim's optimizers (optjit.bitsandbytes)")
for _name in __all__:
    setattr(optim, _name, globals()[_name])
optim.__all__ = list(__all__)
optim.__getattr__ = _missing(optim.__name__)
sys.modules[optim.__name__] = optim
