"""Torch custom ops of mixture-of-experts layers (namespace ``revolta``).

Softmax top-k routing, the router GEMV (with the residual add + RMSNorm before the block fused in), the routed SwiGLU
experts (and the whole routed + shared expert block, for decode) and the weighted sum of the experts' rows. As in
:mod:`revolta_kernels.ops`, the default implementation is the pure-torch reference and every op has a fake
implementation for tracing; native CUDA kernels register in :mod:`revolta_kernels.native_moe`.
"""

from __future__ import annotations

import torch

from revolta_kernels.reference import moe as ref_moe

LIB = "revolta"

@torch.library.custom_op(f"{LIB}::moe_topk_softmax", mutates_args=())
def moe_topk_softmax(router_logits: torch.Tensor, top_k: int, renormalize: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax routing: ``(weights [T, top_k] float32, expert ids [T, top_k] int64)``."""
    return ref_moe.moe_topk_softmax(router_logits, top_k, renormalize)


@moe_topk_softmax.register_fake
def _(router_logits, top_k, renormalize):
    shape = (router_logits.shape[0], top_k)
    return router_logits.new_empty(shape, dtype=torch.float32), router_logits.new_empty(shape, dtype=torch.int64)


@torch.library.custom_op(f"{LIB}::fused_moe", mutates_args=())
def fused_moe(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, topk_weights: torch.Tensor,
              topk_ids: torch.Tensor) -> torch.Tensor:
    """SwiGLU experts weighted by the router: x [T, H], w13 [E, 2I, H], w2 [E, H, I] -> [T, H]."""
    return ref_moe.fused_moe(x, w13, w2, topk_weights, topk_ids)


@fused_moe.register_fake
def _(x, w13, w2, topk_weights, topk_ids):
    return torch.empty_like(x)


@torch.library.custom_op(f"{LIB}::moe_router", mutates_args=())
def moe_router(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Router logits ``x @ weight.T`` ([T, H] x [E, H] -> [T, E], x's dtype): the MoE block's gate, for decode."""
    return ref_moe.moe_router(x, weight)


@moe_router.register_fake
def _(x, weight):
    return x.new_empty((x.shape[0], weight.shape[0]))


@torch.library.custom_op(f"{LIB}::moe_combine", mutates_args=())
def moe_combine(y: torch.Tensor, weights: torch.Tensor, shared: torch.Tensor | None, x: torch.Tensor | None,
                shared_gate: torch.Tensor | None) -> torch.Tensor:
    """``sum_k weights[t, k] * y[t, k]`` (+ ``sigmoid(x[t] . shared_gate) * shared[t]``): a MoE layer's output
    from its routed experts' rows (``revolta::quant_moe_matmul``) and its optional gated shared expert."""
    return ref_moe.moe_combine(y, weights, shared, x, shared_gate)


@moe_combine.register_fake
def _(y, weights, shared, x, shared_gate):
    return y.new_empty((y.shape[0], y.shape[2]))


@torch.library.custom_op(f"{LIB}::moe_router_norm", mutates_args=())
def moe_router_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, norm_weight: torch.Tensor,
                    eps: float, zero_centered: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(logits, normed, h)``: ``h = x + residual``, ``normed = rms_norm(h)`` (as ``fused_add_rms_norm``), router
    logits ``normed @ weight.T`` -- the residual add + norm before a MoE block fused into its router (decode)."""
    return ref_moe.moe_router_norm(x, residual, weight, norm_weight, eps, zero_centered)


@moe_router_norm.register_fake
def _(x, residual, weight, norm_weight, eps, zero_centered):
    return x.new_empty((x.shape[0], weight.shape[0])), torch.empty_like(x), torch.empty_like(x)


@torch.library.custom_op(f"{LIB}::moe_block", mutates_args=())
def moe_block(x: torch.Tensor, router_logits: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, top_k: int,
              renormalize: bool, shared_w13: torch.Tensor | None, shared_w2: torch.Tensor | None,
              shared_gate: torch.Tensor | None) -> torch.Tensor:
    """Routing + routed SwiGLU experts + optional sigmoid-gated shared expert in one op (the decode path)."""
    return ref_moe.moe_block(x, router_logits, w13, w2, top_k, renormalize, shared_w13, shared_w2, shared_gate)


@moe_block.register_fake
def _(x, router_logits, w13, w2, top_k, renormalize, shared_w13, shared_w2, shared_gate):
    return torch.empty_like(x)
