"""CUDA implementation of :mod:`revolta_kernels.ops_memory` (``revolta::l2_prefetch``) through ctypes."""

from __future__ import annotations

import ctypes

import torch

from revolta_kernels import ops_memory
from revolta_kernels.native import LIB, check


def l2_prefetch(tensors: list[torch.Tensor], nbytes: list[int]) -> None:
    ops_memory.check_prefetch_args(tensors, nbytes)
    picked = [(t, n) for t, n in zip(tensors, nbytes, strict=True) if n >= 16 and t.data_ptr() % 16 == 0]
    if not picked:
        return
    ptrs = (ctypes.c_void_p * len(picked))(*(t.data_ptr() for t, _ in picked))
    sizes = (ctypes.c_longlong * len(picked))(*(n for _, n in picked))
    stream = torch.cuda.current_stream(picked[0][0].device).cuda_stream
    assert LIB is not None  # registered only with the library loaded
    check(LIB.revolta_l2_prefetch(ptrs, sizes, len(picked), stream))


def register() -> bool:
    """Register the CUDA kernel for ``revolta::l2_prefetch`` (False without the native library)."""
    if LIB is None:
        return False
    ops_memory.l2_prefetch.register_kernel("cuda")(l2_prefetch)
    return True
