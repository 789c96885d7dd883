"""optjit: optimizer pipelines compiled to fused kernels.

The low-level API over DLPack arrays (NumPy, PyTorch, JAX, CuPy):

    import optjit, numpy as np
    w = np.zeros(1000, np.float32); g = np.ones(1000, np.float32)
    opt = optjit.Engine("chain(clip_grad_norm(max_norm=1.0), adamw(lr=1e-3))", ["w"], [w])
    opt.step([g])          # w is updated in place

PyTorch users: ``optjit.torch.AdamW(model.parameters(), lr=1e-3)`` and friends. wgpu-py users:
``optjit.webgpu.Optimizer(pipeline, device, {name: (buffer, offset, shape)})``.
"""
from ._optjit import Engine, Error, InvalidValue, plan  # noqa: F401

__all__ = ["Engine", "Error", "InvalidValue", "plan"]
