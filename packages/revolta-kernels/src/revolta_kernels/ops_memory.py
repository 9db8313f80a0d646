"""Memory hints as torch custom ops: ``revolta::l2_prefetch``.

A hint changes no tensor, so the default implementation (the CPU path, and CUDA without the native library)
only checks its arguments; the native CUDA kernel registers itself in :mod:`revolta_kernels.native_memory`.
"""

from __future__ import annotations

import torch

LIB = "revolta"
MAX_PREFETCH_RANGES = 8  # tensors one l2_prefetch call takes (csrc/prefetch.cuh kPrefetchMaxRanges)


def check_prefetch_args(tensors: list[torch.Tensor], nbytes: list[int]) -> None:
    """Raise ``ValueError`` naming the problem unless ``nbytes[i]`` leading bytes of each tensor can be prefetched."""
    if len(tensors) != len(nbytes):
        raise ValueError(f"l2_prefetch got {len(tensors)} tensors but {len(nbytes)} byte counts")
    if len(tensors) > MAX_PREFETCH_RANGES:
        raise ValueError(f"l2_prefetch takes at most {MAX_PREFETCH_RANGES} tensors per call, got {len(tensors)}")
    for i, (t, n) in enumerate(zip(tensors, nbytes, strict=True)):
        if not t.is_contiguous():
            raise ValueError(f"l2_prefetch tensor {i} is not contiguous")
        size = t.numel() * t.element_size()
        if n < 0 or n > size:
            raise ValueError(f"l2_prefetch tensor {i} holds {size} bytes; cannot prefetch {n}")


@torch.library.custom_op(f"{LIB}::l2_prefetch", mutates_args=())
def l2_prefetch(tensors: list[torch.Tensor], nbytes: list[int]) -> None:
    """Ask the GPU to pull the first ``nbytes[i]`` bytes of each (contiguous, read-only) tensor into its L2
    cache, for kernels later on the stream that read them. Only a hint: nothing is written or waited for;
    on the CPU it checks its arguments and does nothing else."""
    check_prefetch_args(tensors, nbytes)


@l2_prefetch.register_fake
def _(tensors, nbytes):
    return None
