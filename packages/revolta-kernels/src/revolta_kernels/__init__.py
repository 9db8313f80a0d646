"""revolta-kernels: Volta-first CUDA kernels for LLM inference with pure-torch references.

Import :mod:`revolta_kernels.ops` for the registered torch ops; :func:`native_status` says whether the
native CUDA library is built and loaded (which of the two, and why), and why not; :func:`effective_arch` is the
arch host code decides for (70 in Volta mode, ``REVOLTA_EMULATE_ARCH=70``). A library named by ``REVOLTA_NATIVE_LIB`` that cannot be
used raises :class:`NativeLibraryError` here.
"""

from __future__ import annotations

from revolta_kernels import native, ops, reference
from revolta_kernels.device_arch import effective_arch
from revolta_kernels.native import NativeLibraryError

__version__ = "0.1.0.dev0"

if native.LIB is not None:
    from revolta_kernels import native_ops

    native_ops.register()
    from revolta_kernels import native_attention
    native_attention.register()
    from revolta_kernels import native_quant
    native_quant.register()
    from revolta_kernels import native_dense
    native_dense.register()
    from revolta_kernels import native_quant_moe
    native_quant_moe.register()
    from revolta_kernels import native_qkv_rope
    native_qkv_rope.register()
    from revolta_kernels import native_gdn
    native_gdn.register()
    from revolta_kernels import native_moe
    native_moe.register()


def native_status() -> str:
    """Say whether native CUDA kernels are loaded: which library file, built for which archs and why it was chosen
    for this GPU; if none is, why not and how to build one."""
    return native.STATUS


def native_available() -> bool:
    """True when the native CUDA library is loaded and its kernels are registered for CUDA tensors."""
    return native.LIB is not None


__all__ = ["NativeLibraryError", "effective_arch", "native_available", "native_status", "ops", "reference"]
