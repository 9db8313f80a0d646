"""Paged attention layer: writes new K/V into the cache, then attends over the whole context."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import torch
from torch import nn

from revolta_engine.forward_context import get_forward_context
from revolta_engine.layers.rotary import RopeCache, RotaryEmbedding
from revolta_kernels import ops

if TYPE_CHECKING:
    from revolta_engine.layers.linear import Linear
    from revolta_engine.layers.norm import AddNorm, RMSNorm


class PagedAttention(nn.Module):
    """Attention of the batch's new tokens over their sequences' paged KV cache (layer ``layer_idx``)."""

    def __init__(self, num_heads: int, num_kv_heads: int, head_dim: int, scale: float, layer_idx: int) -> None:
        super().__init__()
        assert num_heads % num_kv_heads == 0, "query heads must be a multiple of KV heads"
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.scale = scale
        self.layer_idx = layer_idx

    def project_rotated(self, qkv_proj: Linear, inp: AddNorm, positions: torch.Tensor,
                        rotary: RotaryEmbedding) -> tuple[torch.Tensor, torch.Tensor] | None:
        """``(q, h)`` from the q/k/v projection of ``norm(h)`` with rotary and this layer's cache write in its own
        kernel (:meth:`Linear.fuses_norm_rope`: quantized decode of few tokens), the keys and values then in the
        cache; None where that does not apply (the caller projects, then calls :meth:`forward`)."""
        ctx = get_forward_context()
        cache = ctx.kv_caches[self.layer_idx]
        if not qkv_proj.fuses_norm_rope(inp, cache.key):
            return None
        rope = RopeCache(positions, cast(torch.Tensor, rotary.cos_sin_cache), rotary.is_neox, self.num_heads,
                         cache.key, cache.value, ctx.attn.slot_mapping, cache.k_scales, cache.v_scales)
        return qkv_proj.forward_prenorm_rope(inp, rope)

    def attend(self, q: torch.Tensor) -> torch.Tensor:
        """Attention of the rotated queries q [T, H, D] whose keys and values are already in the cache."""
        ctx = get_forward_context()
        meta, cache = ctx.attn, ctx.kv_caches[self.layer_idx]
        return ops.paged_attention(
            q, cache.key, cache.value, meta.block_tables, meta.context_lens, meta.query_start_loc,
            meta.max_query_len, self.scale, cache.k_scales, cache.v_scales,
        )

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor | None = None,
                rotary: RotaryEmbedding | None = None,
                qk_norm: tuple[RMSNorm, RMSNorm] | None = None) -> torch.Tensor:
        """q: [T, H, D], k/v: [T, Hkv, D] -> [T, H, D] (q/k/v may be strided views of a fused projection).

        With ``rotary`` and ``positions``, q and k are rotated here, in one op with the cache write and the
        attention (``revolta::rotary_cache_and_attention``); with ``qk_norm`` too, the per-head q and k norms
        run before rotary in the op that writes the cache (``revolta::qk_norm_rotary_and_cache``)."""
        ctx = get_forward_context()
        meta = ctx.attn
        cache = ctx.kv_caches[self.layer_idx]
        if rotary is not None:
            assert positions is not None, "rotary needs positions"
            cos_sin = cast(torch.Tensor, rotary.cos_sin_cache)  # a registered buffer
            if qk_norm is None:  # decode steps of few sequences: one kernel (see ops.rotary_cache_and_attention)
                return ops.rotary_cache_and_attention(
                    positions, q, k, v, cos_sin, rotary.is_neox, cache.key, cache.value, meta.slot_mapping,
                    meta.block_tables, meta.context_lens, meta.query_start_loc, meta.max_query_len, self.scale,
                    cache.k_scales, cache.v_scales,
                )
            qn, kn = qk_norm
            assert qn.eps == kn.eps and qn.zero_centered == kn.zero_centered, "q and k norms differ in kind"
            q = ops.qk_norm_rotary_and_cache(positions, q, k, v, qn.weight, kn.weight, qn.eps, qn.zero_centered,
                                             cos_sin, rotary.is_neox, cache.key, cache.value,
                                             meta.slot_mapping, cache.k_scales, cache.v_scales)
        elif qk_norm is not None:
            raise ValueError("q/k norms are fused with rotary: pass rotary and positions too")
        else:
            ops.reshape_and_cache(k, v, cache.key, cache.value, meta.slot_mapping, cache.k_scales, cache.v_scales)
        return self.attend(q)
