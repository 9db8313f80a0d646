"""Rotary position embedding with every rope scaling transformers knows (llama3, linear, yarn, ...)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from transformers import PretrainedConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from revolta_kernels import ops


def _default_inv_freq(config: PretrainedConfig, head_dim: int) -> tuple[torch.Tensor, float]:
    params = getattr(config, "rope_parameters", None) or {}
    base = params.get("rope_theta", getattr(config, "rope_theta", 10000.0))
    factor = params.get("partial_rotary_factor", getattr(config, "partial_rotary_factor", 1.0))
    dim = int(head_dim * factor)
    exponents = torch.arange(0, dim, 2, dtype=torch.int64, device="cpu").float() / dim
    return 1.0 / (base**exponents), 1.0


class RotaryEmbedding(nn.Module):
    """Precomputes ``cos``/``sin`` for every position up to ``max_position`` exactly as transformers does.

    The inverse frequencies come from transformers' own rope functions, so scaled variants match the
    reference implementation bit for bit.
    """

    def __init__(self, config: PretrainedConfig, head_dim: int, max_position: int, is_neox: bool = True) -> None:
        super().__init__()
        params = getattr(config, "rope_parameters", None) or {}
        rope_type = params.get("rope_type", "default")
        if rope_type == "default":
            inv_freq, scaling = _default_inv_freq(config, head_dim)
        else:
            if rope_type not in ROPE_INIT_FUNCTIONS:
                raise ValueError(f"unsupported rope type {rope_type!r}")
            inv_freq, scaling = ROPE_INIT_FUNCTIONS[rope_type](config, "cpu")
        # Computed on the CPU in float32 (like transformers), then placed where the model is being built.
        t = torch.arange(max_position, dtype=torch.int64, device="cpu").float()
        freqs = t[:, None] * inv_freq.float().cpu()[None, :]
        cache = torch.cat((freqs.cos() * scaling, freqs.sin() * scaling), dim=-1)
        self.register_buffer("cos_sin_cache", cache.to(torch.get_default_device()), persistent=False)
        self.is_neox = is_neox
        self.rotary_dim = 2 * inv_freq.numel()

    def forward(self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor):
        return ops.rotary_embedding(positions, q, k, self.cos_sin_cache, self.is_neox)


@dataclass(frozen=True)
class RopeCache:
    """What a q/k/v projection needs to rotate its outputs and write the paged KV cache itself: the tokens'
    positions and cache slots, the rotary table and style, the query head count, and the layer's caches."""

    positions: torch.Tensor
    cos_sin_cache: torch.Tensor
    is_neox: bool
    num_heads: int
    key_cache: torch.Tensor
    value_cache: torch.Tensor
    slot_mapping: torch.Tensor
    k_scales: torch.Tensor | None
    v_scales: torch.Tensor | None
