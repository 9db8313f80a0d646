"""What the op modules share: the custom-op namespace and the CPU shortcut around a registered op."""

from __future__ import annotations

import torch

LIB = "revolta"


class CpuShortcut:
    """A registered op that CPU tensors reach without the dispatcher.

    On the CPU the op's implementation is plain torch anyway (the reference, or its leaner float32 form in
    :mod:`revolta_kernels.reference.cpu_fast`), and the dispatcher's per-call cost is a noticeable share
    of a small model's decode step. Attribute access
    (``register_kernel``, ``register_fake``, ...) goes to the registered op.
    """

    def __init__(self, op, cpu_impl) -> None:
        self.op = op
        self.cpu_impl = cpu_impl
        self.__doc__ = op.__doc__

    def __call__(self, first: torch.Tensor, *args, **kwargs):
        if first.device.type == "cpu" and not torch.compiler.is_compiling():
            return self.cpu_impl(first, *args, **kwargs)
        return self.op(first, *args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self.op, name)
