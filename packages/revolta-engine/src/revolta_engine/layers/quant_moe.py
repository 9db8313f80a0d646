"""Quantized mixture-of-experts experts (AWQ / GPTQ checkpoints that quantize the experts, such as
Qwen3-30B-A3B-AWQ): one quantized SwiGLU MLP per expert, run for the tokens routed to it.

Every expert is an ordinary :class:`~revolta_engine.layers.mlp.SwiGLUMLP` over quantized linear layers, so its
checkpoint tensors (``experts.<e>.gate_proj.qweight`` ...) load, repack (AWQ interleaving, GPTQ act-order) and split
over tensor-parallel ranks exactly as a dense model's MLP does, and its matmuls are the quantized linear ops (the
skinny / tensor-core CUDA kernels, or the reference on a CPU). The experts stay packed in memory: what makes a
quantized MoE model fit is the 4-bit experts.

The block finds the experts its tokens were routed to on the host, so it runs outside CUDA graphs (the engine
captures none for such a model) and launches one MLP per active expert: correct everywhere, not yet the fused
grouped kernel a fast quantized MoE decode needs.
"""

from __future__ import annotations

import torch
from torch import nn

from revolta_engine.layers.mlp import SwiGLUMLP
from revolta_engine.layers.quant import QuantConfig


class QuantizedExperts(nn.ModuleList):
    """``num_experts`` quantized SwiGLU MLPs; item ``e`` is ``<prefix>.experts.<e>``, as the checkpoint names it."""

    def __init__(self, num_experts: int, hidden: int, inter: int, quant: QuantConfig, prefix: str) -> None:
        # tensor parallelism: each expert's intermediate channels are split over the ranks (its output is this
        # rank's part of the sum, reduced once for the whole block)
        super().__init__(SwiGLUMLP(hidden, inter, quant=quant, prefix=f"{prefix}.experts.{e}", parallel="column",
                                   reduce_results=False) for e in range(num_experts))

    def forward(self, x: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        """``sum_k weights[t, k] * expert[ids[t, k]](x[t])`` for each token ``t`` (``weights`` in ``x``'s dtype)."""
        out = torch.zeros_like(x)
        for expert in torch.unique(ids).tolist():
            tokens, slots = torch.nonzero(ids == expert, as_tuple=True)
            y = self[expert](x[tokens]) * weights[tokens, slots].unsqueeze(-1)
            out.index_add_(0, tokens, y)
        return out
