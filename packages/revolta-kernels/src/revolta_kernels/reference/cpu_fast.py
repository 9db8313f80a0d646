"""Lean CPU paths of the small ops, for float32 (the CPU's working dtype).

Same math, in the same order, as the references (:mod:`~revolta_kernels.reference.norm`, ``rotary``,
``activation``), so float32 results are bit-identical to them; only the number of torch calls shrinks.
A decode step of a small model is made of thousands of such calls on tensors of a few hundred values, where
each call's fixed cost (Python, dispatch, an allocation) outweighs its arithmetic. Every other dtype or
variant goes to the reference unchanged.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from revolta_kernels.reference import activation, norm, rotary

_F32 = torch.float32


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, zero_centered: bool = False) -> torch.Tensor:
    """:func:`revolta_kernels.reference.rms_norm` through torch's own ``rms_norm`` for float32."""
    if x.dtype != _F32 or weight.dtype != _F32:
        return norm.rms_norm(x, weight, eps, zero_centered)
    return F.rms_norm(x, (x.shape[-1],), weight + 1.0 if zero_centered else weight, eps)


def fused_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float, zero_centered: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`revolta_kernels.reference.fused_add_rms_norm` with one add and one norm call for float32."""
    if x.dtype != _F32 or residual.dtype != _F32:
        return norm.fused_add_rms_norm(x, residual, weight, eps, zero_centered)
    new_residual = x + residual
    return rms_norm(new_residual, weight, eps, zero_centered), new_residual


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """:func:`revolta_kernels.reference.silu_and_mul` without the dtype round trips for float32."""
    if x.dtype != _F32:
        return activation.silu_and_mul(x)
    d = x.shape[-1] // 2
    return F.silu(x[..., :d]) * x[..., d:]


def _joint_heads(query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
    """``[T, H + Hkv, D]``: query heads then key heads, a view when key directly follows query in memory.

    That is the case for q and k split from one fused qkv projection; anything else is concatenated.
    """
    t, h, d = query.shape
    hkv = key.shape[1]
    # a single token's row stride is arbitrary (any value is valid for a dimension of size 1)
    row = query.stride(0) if t > 1 else (h + hkv) * d
    if (key.shape[0] == t and key.shape[2] == d and query.stride()[1:] == (d, 1) and key.stride()[1:] == (d, 1)
            and (t == 1 or key.stride(0) == row) and row >= (h + hkv) * d
            and key.untyped_storage().data_ptr() == query.untyped_storage().data_ptr()
            and key.storage_offset() == query.storage_offset() + h * d):
        return query.as_strided((t, h + hkv, d), (row, d, 1), query.storage_offset())
    return torch.cat((query, key), dim=1)


def rotary_embedding(positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor, cos_sin_cache: torch.Tensor,
                     is_neox: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`revolta_kernels.reference.rotary_embedding` rotating query and key heads together.

    Full-width neox rotary in float32 only; the results are views of one new ``[T, H + Hkv, D]`` tensor.
    """
    rot_dim = cos_sin_cache.shape[-1]
    if (not is_neox or rot_dim != query.shape[-1] or query.dtype != _F32 or key.dtype != _F32
            or cos_sin_cache.dtype != _F32):
        return rotary.rotary_embedding(positions, query, key, cos_sin_cache, is_neox)
    cos, sin = cos_sin_cache.index_select(0, positions).unsqueeze(1).chunk(2, dim=-1)
    x1, x2 = _joint_heads(query, key).chunk(2, dim=-1)
    out = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
    h = query.shape[1]
    return out[:, :h], out[:, h:]
