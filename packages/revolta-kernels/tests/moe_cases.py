"""Inputs and tolerances shared by the Gated DeltaNet and MoE GPU tests (test_gdn_gpu.py, test_moe_gpu.py)."""

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


def routed_case(dtype, tokens: int, e: int, h: int, inter: int, shared: str, gen: torch.Generator):
    """A MoE block's inputs with router logits: x, distinct logits (exact in every dtype, multiples of 1/16 below 16,
    so no ties at the top-k boundary), the experts, and the shared expert's weights for ``shared`` ("none",
    "ungated" or "gated"), drawn from ``gen`` in that order."""
    w13, w2 = experts(e, h, inter, dtype, gen)
    x = torch.randn(tokens, h, device="cuda", generator=gen).to(dtype)
    perms = [torch.randperm(e, device="cuda", generator=gen) for _ in range(tokens)]
    logits = ((torch.stack(perms) - e // 2) / 16).clamp(-15.9375, 15.9375).to(dtype)
    sw13 = (torch.randn(2 * inter, h, device="cuda", generator=gen) / h**0.5).to(dtype)
    sw2 = (torch.randn(h, inter, device="cuda", generator=gen) / inter**0.5).to(dtype)
    sgate = (torch.randn(1, h, device="cuda", generator=gen) / h**0.5).to(dtype)
    args = {"none": (None, None, None), "ungated": (sw13, sw2, None), "gated": (sw13, sw2, sgate)}[shared]
    return x, logits, w13, w2, args
