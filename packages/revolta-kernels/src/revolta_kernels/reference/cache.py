"""Reference paged KV cache write and dequantization.

Cache layout (shared with the native kernels):
    key_cache, value_cache: [num_blocks, num_kv_heads, block_size, head_dim]
        dtype float16/bfloat16/float32 (stored as is), int8 (with scales) or float8_e4m3fn/float8_e5m2
        (storage only: values are cast, no scale).
    k_scales, v_scales (int8 only): [num_blocks, num_kv_heads, block_size] float32, one scale per token
        and head: ``x ~= q * scale`` with ``scale = max|x| / 127``.
A token's slot is ``block_id * block_size + offset``; a slot of -1 is skipped (padding).
"""

from __future__ import annotations

import torch

INT8_MAX = 127.0


def _quantize_int8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    # x: [T, H, D] float32 -> int8 values and [T, H] scales
    scale = x.abs().amax(dim=-1).clamp_min(1e-8) / INT8_MAX
    q = torch.round(x / scale.unsqueeze(-1)).clamp(-INT8_MAX, INT8_MAX).to(torch.int8)
    return q, scale


def reshape_and_cache(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                      slot_mapping: torch.Tensor, k_scales: torch.Tensor | None = None,
                      v_scales: torch.Tensor | None = None) -> None:
    """Write ``key``/``value`` ([T, num_kv_heads, head_dim]) into the paged caches in place."""
    block_size = key_cache.shape[2]
    if key.shape[0] == 1 and key_cache.dtype != torch.int8:
        # One token (batch-1 decode): plain indexing, far cheaper than an index_put on the CPU.
        slot = int(slot_mapping[0])
        if slot >= 0:
            key_cache[slot // block_size, :, slot % block_size] = key[0]
            value_cache[slot // block_size, :, slot % block_size] = value[0]
        return
    valid = slot_mapping >= 0
    if not bool(valid.all()):  # padding slots (-1) are skipped
        key, value, slot_mapping = key[valid], value[valid], slot_mapping[valid]
    slots = slot_mapping.long()
    blocks, offsets = slots // block_size, slots % block_size
    for src, cache, scales in ((key, key_cache, k_scales), (value, value_cache, v_scales)):
        if cache.dtype == torch.int8:
            if scales is None:
                raise ValueError("int8 KV cache needs k_scales and v_scales")
            q, s = _quantize_int8(src.float())
            cache[blocks, :, offsets] = q
            scales[blocks, :, offsets] = s
        else:
            cache[blocks, :, offsets] = src.to(cache.dtype)


def dequantize_kv(cache: torch.Tensor, scales: torch.Tensor | None) -> torch.Tensor:
    """Return the cache (or a gathered slice of it) as float32, applying int8 scales."""
    if cache.dtype == torch.int8:
        if scales is None:
            raise ValueError("int8 KV cache needs scales to dequantize")
        return cache.float() * scales.float().unsqueeze(-1)
    return cache.float()
