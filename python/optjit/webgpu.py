"""optjit on wgpu-py's own device and buffers: the step runs on the application's GPUDevice,
updating its GPUBuffers in place (nothing copied when one buffer holds every parameter)::

    import wgpu, numpy as np, optjit.webgpu
    device = wgpu.gpu.request_adapter_sync().request_device_sync()
    usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
    params = device.create_buffer_with_data(data=np.zeros(1000, np.float32), usage=usage)
    grads = device.create_buffer_with_data(data=np.ones(1000, np.float32), usage=usage)
    opt = optjit.webgpu.Optimizer("adamw(lr=1e-3)", device,
                                  {"w": (params, 0, (600,)), "b": (params, 2400, (400,))})
    opt.step([(grads, 0), (grads, 2400)])

Parameters are (buffer, byte offset, shape[, dtype]) with dtype "f32" (default), "bf16" or
"f16"; gradients (buffer, byte offset) of the gradient dtype. Buffers need usage STORAGE |
COPY_SRC | COPY_DST, and must not be mapped while optjit uses them: wgpu-native aborts the
process on a submission that names a mapped buffer, and its wgpuBufferGetMapState is not
implemented, so optjit cannot ask (a destroyed buffer, or one of another device, is an
error). wgpu-py and optjit must use the same wgpu-native library (both take the `wgpu`
package's by default); a different one is an error here, not a crash.
"""
import operator
import os

from ._optjit import Engine, Error, webgpu_library

__all__ = ["Optimizer", "handle"]


def _ffi():
    try:
        from wgpu.backends.wgpu_native import _ffi
    except ImportError as e:  # pragma: no cover - wgpu is a test dependency
        raise Error("optjit.webgpu needs wgpu-py (pip install wgpu)") from e
    return _ffi


def handle(obj):
    """The native handle (WGPUDevice, WGPUBuffer) of a wgpu-py object, or an int as it is."""
    if isinstance(obj, int):
        return obj
    internal = getattr(obj, "_internal", None)
    if internal is None:
        raise Error(f"{type(obj).__name__} is not a wgpu-py object with a native handle")
    return int(_ffi().ffi.cast("uintptr_t", internal))


def _offset(value, what):
    """A byte offset: a whole number (an int, a NumPy integer), 0 or more."""
    try:
        n = operator.index(value)
    except TypeError:
        n = -1
    if isinstance(value, bool) or n < 0:
        raise Error(f"{what}: a byte offset is a whole number, 0 or more, not {value!r}")
    return n


def _same_library():
    ours = os.path.realpath(webgpu_library())
    theirs = os.path.realpath(_ffi().lib_path)
    if ours != theirs:
        raise Error(
            f"wgpu-py uses {theirs} but optjit loads {ours}: their devices and buffers do not "
            f"mix; set OPTJIT_WGPU_LIBRARY={theirs} (or wgpu-py's WGPU_LIB_PATH={ours})")


class Optimizer:
    """A pipeline (text or a file) over parameters in wgpu-py buffers on `device`.

    params: {name: (buffer, byte_offset, shape[, dtype])}, in order. `adapter`: the index in
    `optjit devices` of the adapter the device is on, which names it in the kernel cache and
    tuning decisions (wgpu-native cannot tell); -1 leaves it unnamed. The other keywords are
    Engine's.
    """

    def __init__(self, pipeline, device, params, *, adapter=-1, group_of=(), groups=1,
                 grad_dtype=None, cache=True, param_rounding="nearest"):
        _same_library()
        if not isinstance(params, dict):
            raise Error(f"params is a dict {{name: (buffer, byte_offset, shape[, dtype])}}, not "
                        f"a {type(params).__name__}")
        names, memory, dtypes, shapes = [], [], [], []
        for name, spec in params.items():
            if not isinstance(spec, (tuple, list)) or len(spec) not in (3, 4):
                raise Error(f"parameter '{name}': expected (buffer, byte_offset, shape[, dtype])")
            buf, offset, shape = spec[:3]
            names.append(name)
            memory.append((handle(buf), _offset(offset, f"parameter '{name}'")))
            shapes.append([int(d) for d in shape])
            dtypes.append(spec[3] if len(spec) == 4 else "f32")
        # Kept alive as long as the optimizer uses them: wgpu-py releases a buffer (and a device)
        # when its Python object goes, and the engine holds only their handles.
        self.device = device
        self.buffers = [spec[0] for spec in params.values()]
        self.engine = Engine.on_device(
            pipeline, names, memory, dtypes, shapes, group_of=list(group_of), groups=groups,
            backend="webgpu", device=adapter, queue=handle(device), grad_dtype=grad_dtype,
            cache=cache, param_rounding=param_rounding)

    def step(self, grads):
        """One step; grads: [(buffer, byte_offset)] in parameter order. True if it skipped."""
        memory = []
        for i, g in enumerate(grads):
            if not isinstance(g, (tuple, list)) or len(g) != 2:
                raise Error(f"gradient {i}: expected (buffer, byte_offset), not {g!r}")
            memory.append((handle(g[0]), _offset(g[1], f"gradient {i}")))
        return self.engine.step_device(memory)

    def __getattr__(self, name):  # set_hyper, hyper, plan, save, load, step_count, ...
        return getattr(self.engine, name)
