"""Reference gated activations."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """Return ``silu(x[..., :d]) * x[..., d:]`` where ``d = x.shape[-1] // 2``."""
    d = x.shape[-1] // 2
    xf = x.float()
    return (F.silu(xf[..., :d]) * xf[..., d:]).to(x.dtype)


def sigmoid_gate_mul(x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """``x * sigmoid(gate)`` for ``x`` [T, H * D] and ``gate`` [T, H, D] (may be strided), as [T, H * D]."""
    return (x.reshape(gate.shape) * torch.sigmoid(gate)).reshape(x.shape)
