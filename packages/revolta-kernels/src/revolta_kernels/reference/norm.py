"""Reference RMSNorm variants."""

from __future__ import annotations

import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, zero_centered: bool = False) -> torch.Tensor:
    """RMSNorm over the last dimension.

    ``zero_centered`` selects the ``x_hat * (1 + w)`` form used by Qwen3-Next/Qwen3.5 and Gemma.
    """
    xf = x.float()
    x_hat = xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps)
    w = weight.float()
    if zero_centered:
        w = w + 1.0
    return (x_hat * w).to(x.dtype)


def fused_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float, zero_centered: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Add ``x`` to ``residual`` then normalise; returns ``(normed, new_residual)``."""
    new_residual = (x.float() + residual.float()).to(residual.dtype)
    return rms_norm(new_residual, weight, eps, zero_centered).to(x.dtype), new_residual
