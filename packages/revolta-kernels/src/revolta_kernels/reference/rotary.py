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


def rotary_embedding(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    is_neox: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
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
