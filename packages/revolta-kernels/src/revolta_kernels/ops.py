"""The public ops, registered once as torch custom ops (namespace ``revolta``).

Every op has a default implementation (the pure-torch reference, used on the CPU and wherever no native
kernel exists) and a fake implementation so torch.compile and CUDA graph capture can trace it. Native CUDA
kernels register themselves for the ``cuda`` device in :mod:`revolta_kernels.native` when the extension is
built and loadable.

On sm_90 and later the native kernels are launched with programmatic dependent launch (csrc/pdl.cuh): a kernel
may start while the one before it finishes. The decode-path kernels (rotary + cache write, paged attention) read
their step inputs (positions, slot mappings, block tables, context lengths) before waiting on that previous
kernel, so those inputs must be written by copies or ordinary kernels (torch's, or anything not launched with
PDL), never by a PDL kernel launched right before.
"""

from __future__ import annotations

import torch

from revolta_kernels import reference as ref
from revolta_kernels.ops_attention import (  # noqa: F401 (the cache and attention ops are this module's API too)
    _qk_norm_rotary_and_cache,
    _reshape_and_cache,
    _rotary_and_cache,
    _rotary_cache_and_attention,
    paged_attention,
    paged_attention_decode,
    paged_attention_prefill,
    qk_norm_rotary_and_cache,
    reshape_and_cache,
    rotary_and_cache,
    rotary_cache_and_attention,
)
from revolta_kernels.ops_common import LIB, CpuShortcut
from revolta_kernels.reference import cpu_fast


@torch.library.custom_op(f"{LIB}::rms_norm", mutates_args=())
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, zero_centered: bool = False) -> torch.Tensor:
    """RMSNorm over the last dimension (``zero_centered`` uses ``x_hat * (1 + w)``)."""
    return ref.rms_norm(x, weight, eps, zero_centered)


@rms_norm.register_fake
def _(x, weight, eps, zero_centered=False):
    return torch.empty_like(x)


@torch.library.custom_op(f"{LIB}::fused_add_rms_norm", mutates_args=())
def fused_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float, zero_centered: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """``residual += x`` then RMSNorm; returns ``(normed, new_residual)``."""
    return ref.fused_add_rms_norm(x, residual, weight, eps, zero_centered)


@fused_add_rms_norm.register_fake
def _(x, residual, weight, eps, zero_centered=False):
    return torch.empty_like(x), torch.empty_like(residual)


@torch.library.custom_op(f"{LIB}::silu_and_mul", mutates_args=())
def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """``silu(gate) * up`` where ``x = cat(gate, up)`` on the last dimension."""
    return ref.silu_and_mul(x)


@silu_and_mul.register_fake
def _(x):
    return x.new_empty((*x.shape[:-1], x.shape[-1] // 2))


@torch.library.custom_op(f"{LIB}::sigmoid_gate_mul", mutates_args=())
def sigmoid_gate_mul(x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """``x * sigmoid(gate)`` (torch's rounding) for ``x`` [T, H * D] and ``gate`` [T, H, D], which may be a
    strided view (Qwen3.5's attention output gate, interleaved with the query heads); returns [T, H * D]."""
    return ref.sigmoid_gate_mul(x, gate)


@sigmoid_gate_mul.register_fake
def _(x, gate):
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


@torch.library.custom_op(f"{LIB}::argmax", mutates_args=())
def argmax(x: torch.Tensor) -> torch.Tensor:
    """Index of the maximum of each row (last dimension) as int64, like ``torch.argmax(x, dim=-1)``: the
    first index of the maximum, NaN above every number. Greedy sampling's op (float32 logits)."""
    return x.argmax(dim=-1)


@argmax.register_fake
def _(x):
    return x.new_empty(x.shape[:-1], dtype=torch.int64)


@torch.library.custom_op(f"{LIB}::rotary_embedding", mutates_args=())
def rotary_embedding(positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor, cos_sin_cache: torch.Tensor,
                     is_neox: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotary embedding of query [T, H, D] and key [T, Hkv, D]; partial when ``rot_dim < D``."""
    return ref.rotary_embedding(positions, query, key, cos_sin_cache, is_neox)


@rotary_embedding.register_fake
def _(positions, query, key, cos_sin_cache, is_neox):
    return torch.empty_like(query), torch.empty_like(key)


rms_norm = CpuShortcut(rms_norm, cpu_fast.rms_norm)  # type: ignore[assignment]
fused_add_rms_norm = CpuShortcut(fused_add_rms_norm, cpu_fast.fused_add_rms_norm)  # type: ignore[assignment]
silu_and_mul = CpuShortcut(silu_and_mul, cpu_fast.silu_and_mul)  # type: ignore[assignment]
argmax = CpuShortcut(argmax, lambda x: x.argmax(dim=-1))  # type: ignore[assignment]
sigmoid_gate_mul = CpuShortcut(sigmoid_gate_mul, ref.sigmoid_gate_mul)  # type: ignore[assignment]
rotary_embedding = CpuShortcut(rotary_embedding, cpu_fast.rotary_embedding)  # type: ignore[assignment]
