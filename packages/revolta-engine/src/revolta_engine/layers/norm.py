"""RMSNorm through revolta-kernels, and :class:`AddNorm`: a residual add + norm its consumer may fuse."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from revolta_kernels import ops


class RMSNorm(nn.Module):
    """RMSNorm; ``forward(x, residual)`` fuses the residual add and returns ``(normed, residual)``."""

    def __init__(self, hidden_size: int, eps: float = 1e-6, zero_centered: bool = False) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size), requires_grad=False)
        self.eps = eps
        self.zero_centered = zero_centered

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        if residual is None:
            return ops.rms_norm(x, self.weight, self.eps, self.zero_centered)
        return ops.fused_add_rms_norm(x, residual, self.weight, self.eps, self.zero_centered)


@dataclass(frozen=True)
class AddNorm:
    """The input of a block that starts with ``h = x + residual`` (or ``h = x`` without a residual), then
    ``norm(h)``; the block returns ``h`` as the new residual.

    A pre-norm decoder hands this to its mixer and MLP instead of the normed tensor so that their first kernel
    can compute the norm while it stages its activations (decode GEMVs, the MoE router), which saves one
    latency-bound kernel per norm; :meth:`run` is the unfused path.
    """

    x: torch.Tensor
    residual: torch.Tensor | None
    norm: RMSNorm

    def run(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(norm(h), h)`` through the separate norm kernel."""
        if self.residual is None:
            return self.norm(self.x), self.x
        return self.norm(self.x, self.residual)
