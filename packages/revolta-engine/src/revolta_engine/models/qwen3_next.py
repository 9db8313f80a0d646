"""Qwen3-Next: hybrid Gated DeltaNet / gated attention with sparse MoE (shared expert) feed-forward.

Its checkpoints interleave the Gated DeltaNet input projections per key head: ``in_proj_qkvz`` holds, for
each key head, ``[q (Dk), k (Dk), v (r*Dv), z (r*Dv)]`` with ``r`` value heads per key head, and
``in_proj_ba`` holds ``[b (r), a (r)]``. They are reordered at load time into Qwen3.5's split layout.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import torch
from torch import nn
from transformers import PretrainedConfig

from revolta_engine.errors import UnsupportedModelError
from revolta_engine.layers.mlp import SwiGLUMLP
from revolta_engine.layers.moe import SparseMoeBlock
from revolta_engine.models.hybrid import HybridForCausalLM
from revolta_engine.models.qwen3_moe import is_moe_layer


def split_qkvz(w: torch.Tensor, config: PretrainedConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """Interleaved ``in_proj_qkvz`` rows -> (``[q; k; v]`` rows, ``z`` rows), heads in order."""
    hk, dk, dv = config.linear_num_key_heads, config.linear_key_head_dim, config.linear_value_head_dim
    r = config.linear_num_value_heads // hk
    grouped = w.reshape(hk, 2 * dk + 2 * r * dv, *w.shape[1:])
    q, k, v, z = grouped.split([dk, dk, r * dv, r * dv], dim=1)
    flat = [t.reshape(-1, *w.shape[1:]) for t in (q, k, v, z)]
    return torch.cat(flat[:3]), flat[3]


def split_ba(w: torch.Tensor, config: PretrainedConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """Interleaved ``in_proj_ba`` rows -> (``b`` rows, ``a`` rows) per value head."""
    hk = config.linear_num_key_heads
    r = config.linear_num_value_heads // hk
    b, a = w.reshape(hk, 2 * r, *w.shape[1:]).split([r, r], dim=1)
    return b.reshape(-1, *w.shape[1:]), a.reshape(-1, *w.shape[1:])


class Qwen3NextForCausalLM(HybridForCausalLM):
    """Qwen3NextForCausalLM (Qwen3-Next-80B-A3B)."""

    def make_mlp(self, config: PretrainedConfig, layer_idx: int) -> nn.Module:
        if is_moe_layer(config, layer_idx):
            return SparseMoeBlock(config, renormalize=bool(config.norm_topk_prob), shared_expert=True,
                                  prefix=self.mlp_name(layer_idx))
        return SwiGLUMLP(config.hidden_size, config.intermediate_size, quant=self.quant_config,
                         prefix=self.mlp_name(layer_idx), parallel="column")

    def rename(self, weights: Iterable[tuple[str, torch.Tensor]]) -> Iterator[tuple[str, torch.Tensor]]:
        for name, tensor in weights:
            if (".in_proj_qkvz." in name or ".in_proj_ba." in name) and not name.endswith(".weight"):
                raise UnsupportedModelError(
                    f"checkpoint tensor {name!r}: quantized Qwen3-Next input projections are not supported (their "
                    "per-head interleaved columns are reordered at load, which packed weights do not allow)")
            if ".in_proj_qkvz." in name:
                qkv, z = split_qkvz(tensor, self.config)
                yield name.replace(".in_proj_qkvz.", ".in_proj_qkv."), qkv
                yield name.replace(".in_proj_qkvz.", ".in_proj_z."), z
            elif ".in_proj_ba." in name:
                b, a = split_ba(tensor, self.config)
                yield name.replace(".in_proj_ba.", ".in_proj_b."), b
                yield name.replace(".in_proj_ba.", ".in_proj_a."), a
            elif name.startswith("mtp."):
                continue  # multi-token-prediction head: not used for decoding
            else:
                yield name, tensor
