"""Rotary position embedding with every rope scaling transformers knows (llama3, linear, yarn, ...)."""

from __future__ import annotations

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
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim)), 1.0


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
        t = torch.arange(max_position, dtype=torch.int64).float()
        freqs = t[:, None] * inv_freq.float()[None, :]
        cache = torch.cat((freqs.cos() * scaling, freqs.sin() * scaling), dim=-1)
        self.register_buffer("cos_sin_cache", cache, persistent=False)
        self.is_neox = is_neox
        self.rotary_dim = 2 * inv_freq.numel()

    def forward(self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor):
        return ops.rotary_embedding(positions, q, k, self.cos_sin_cache, self.is_neox)
