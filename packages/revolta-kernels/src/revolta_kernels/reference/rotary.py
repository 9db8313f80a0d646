"""Reference rotary position embedding (neox and gpt-j styles, partial rotary)."""

from __future__ import annotations

import torch


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, is_neox: bool) -> torch.Tensor:
    # x: [T, H, rot_dim] float32; cos/sin: [T, 1, rot_dim // 2]
    if is_neox:
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)


def rotary_embedding(positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor, cos_sin_cache: torch.Tensor,
                     is_neox: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate the first ``rot_dim`` channels of each head of ``query`` and ``key``.

    Args:
        positions: [T] integer positions of the tokens.
        query: [T, num_heads, head_dim].
        key: [T, num_kv_heads, head_dim].
        cos_sin_cache: [max_position, rot_dim], cos in the first half and sin in the second.
        is_neox: True rotates the two halves (neox); False rotates interleaved pairs (gpt-j).
    """
    rot_dim = cos_sin_cache.shape[-1]
    cos, sin = cos_sin_cache.index_select(0, positions.long()).float().unsqueeze(1).chunk(2, dim=-1)
    out = []
    for x in (query, key):
        xf = x.float()
        if rot_dim == xf.shape[-1]:
            out.append(_rotate(xf, cos, sin, is_neox).to(x.dtype))
        else:
            rotated = _rotate(xf[..., :rot_dim], cos, sin, is_neox)
            out.append(torch.cat((rotated, xf[..., rot_dim:]), dim=-1).to(x.dtype))
    return out[0], out[1]


def rotary_and_cache(positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     cos_sin_cache: torch.Tensor, is_neox: bool, key_cache: torch.Tensor, value_cache: torch.Tensor,
                     slot_mapping: torch.Tensor, k_scales: torch.Tensor | None = None,
                     v_scales: torch.Tensor | None = None) -> torch.Tensor:
    """:func:`rotary_embedding` of query and key, then :func:`~revolta_kernels.reference.reshape_and_cache`
    of the rotated key and ``value``; returns the rotated query (the rotated key lives in the cache)."""
    from revolta_kernels.reference.cache import reshape_and_cache

    q, k = rotary_embedding(positions, query, key, cos_sin_cache, is_neox)
    reshape_and_cache(k, value, key_cache, value_cache, slot_mapping, k_scales, v_scales)
    return q


def qk_norm_rotary_and_cache(positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                             q_norm_weight: torch.Tensor, k_norm_weight: torch.Tensor, eps: float, zero_centered: bool,
                             cos_sin_cache: torch.Tensor, is_neox: bool, key_cache: torch.Tensor,
                             value_cache: torch.Tensor, slot_mapping: torch.Tensor,
                             k_scales: torch.Tensor | None = None,
                             v_scales: torch.Tensor | None = None) -> torch.Tensor:
    """Per-head RMSNorm of query and key (Qwen3 / Qwen3.5 q/k norms), then :func:`rotary_and_cache`."""
    from revolta_kernels.reference.norm import rms_norm

    q = rms_norm(query, q_norm_weight, eps, zero_centered)
    k = rms_norm(key, k_norm_weight, eps, zero_centered)
    return rotary_and_cache(positions, q, k, value, cos_sin_cache, is_neox, key_cache, value_cache, slot_mapping,
                            k_scales, v_scales)
