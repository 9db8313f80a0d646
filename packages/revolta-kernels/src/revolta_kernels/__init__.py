"""revolta-kernels: Volta-first CUDA kernels for LLM inference with pure-torch references.

Import :mod:`revolta_kernels.ops` for the registered torch ops; :func:`native_status` says whether the
native CUDA extension is built and loaded, and why not.
"""

from __future__ import annotations

from revolta_kernels import ops, reference

__version__ = "0.1.0.dev0"


def native_status() -> str:
    """Say whether native CUDA kernels are available, and if not, why."""
    return "reference only: this build ships no native CUDA kernels yet"


__all__ = ["native_status", "ops", "reference"]
