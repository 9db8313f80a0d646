"""Gated activations."""

from __future__ import annotations

import torch
from torch import nn

from revolta_kernels import ops


class SiluAndMul(nn.Module):
    """``silu(gate) * up`` on a merged ``[gate, up]`` projection."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ops.silu_and_mul(x)
