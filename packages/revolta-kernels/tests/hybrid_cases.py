"""Shared pieces of the hybrid-model GPU tests (test_hybrid_gpu.py, test_moe_gpu.py)."""

from __future__ import annotations

import torch

TOL = {torch.float16: 2e-3, torch.bfloat16: 1e-2, torch.float32: 1e-4}  # relative L2 bound per storage type
DTYPES = [torch.float16, torch.bfloat16, torch.float32]


def cuda_gen(seed: int) -> torch.Generator:
    return torch.Generator(device="cuda").manual_seed(seed)


def experts(e, h, inter, dtype, gen):
    """Random w13 [E, 2I, H] and w2 [E, H, I] expert weights, scaled to keep activations O(1)."""
    w13 = (torch.randn(e, 2 * inter, h, device="cuda", generator=gen) / h**0.5).to(dtype)
    w2 = (torch.randn(e, h, inter, device="cuda", generator=gen) / inter**0.5).to(dtype)
    return w13, w2
