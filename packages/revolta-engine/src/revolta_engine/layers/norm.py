"""RMSNorm through revolta-kernels."""

from __future__ import annotations

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
