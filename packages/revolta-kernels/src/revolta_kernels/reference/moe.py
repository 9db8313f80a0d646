"""Reference mixture-of-experts: softmax top-k routing and expert dispatch by sorting tokens per expert."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from revolta_kernels.reference import norm as ref_norm
from revolta_kernels.reference.activation import silu_and_mul


def moe_topk_softmax(router_logits: torch.Tensor, top_k: int, renormalize: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax over experts (float32), keep the ``top_k`` largest, optionally renormalise them to sum to 1.

    Returns ``(weights [T, top_k] float32, expert ids [T, top_k] int64)``.
    """
    probs = torch.softmax(router_logits.float(), dim=-1)
    weights, ids = torch.topk(probs, top_k, dim=-1)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights, ids


def moe_combine(y: torch.Tensor, weights: torch.Tensor, shared: torch.Tensor | None, x: torch.Tensor | None,
                shared_gate: torch.Tensor | None) -> torch.Tensor:
    """The routed experts' outputs ``y [T, K, H]`` weighted by the router (``weights [T, K]``, cast to ``y``'s
    dtype first, as transformers does) and summed in float32, plus ``sigmoid(x @ shared_gate) * shared`` when a
    shared expert's output ``shared [T, H]`` is given (``shared_gate``: its gate's weight, ``H`` values)."""
    out = (y * weights.to(y.dtype).unsqueeze(-1)).float().sum(1).to(y.dtype)
    if shared is not None:
        if x is None or shared_gate is None:
            raise ValueError("moe_combine: a shared expert's output needs x and shared_gate")
        out = out + torch.sigmoid(F.linear(x, shared_gate.reshape(1, -1))) * shared
    return out


def fused_moe(
    x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor
) -> torch.Tensor:
    """SwiGLU experts: ``sum_k w_k * down_e(silu(gate_e(x)) * up_e(x))`` over each token's chosen experts.

    x: [T, H]; w13: [E, 2I, H] (gate rows then up rows); w2: [E, H, I]; topk_weights/ids: [T, K].
    The (token, expert) pairs are sorted by expert so each expert runs one matmul over its tokens, then the
    weighted results are scattered back and summed per token.
    """
    num_tokens, top_k = topk_ids.shape
    num_experts, two_inter, _ = w13.shape
    flat_ids = topk_ids.reshape(-1)
    order = torch.argsort(flat_ids, stable=True)
    token_of = order // top_k
    counts = torch.bincount(flat_ids, minlength=num_experts).tolist()
    xs = x.float().index_select(0, token_of)
    ys = torch.empty(xs.shape[0], w2.shape[1], dtype=torch.float32, device=x.device)
    start = 0
    for e, n in enumerate(counts):
        if n == 0:
            continue
        h = F.linear(xs[start:start + n], w13[e].float())
        gate, up = h.split(two_inter // 2, dim=-1)
        ys[start:start + n] = F.linear(F.silu(gate) * up, w2[e].float())
        start += n
    ys = ys * topk_weights.reshape(-1).float().index_select(0, order)[:, None]
    out = torch.zeros(num_tokens, w2.shape[1], dtype=torch.float32, device=x.device)
    out.index_add_(0, token_of, ys)
    return out.to(x.dtype)


def moe_router(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Router logits of a MoE block: ``F.linear(x, weight)`` ([T, H] x [E, H] -> [T, E])."""
    return F.linear(x, weight)


def moe_router_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, norm_weight: torch.Tensor, eps: float,
    zero_centered: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The residual add + RMSNorm before a MoE block and its router: ``(logits, normed, h)`` with
    ``normed, h = fused_add_rms_norm(x, residual, norm_weight, eps, zero_centered)`` and ``logits = normed @ weight.T``.
    """
    normed, h = ref_norm.fused_add_rms_norm(x, residual, norm_weight, eps, zero_centered)
    return moe_router(normed, weight), normed, h


def moe_block(
    x: torch.Tensor, router_logits: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, top_k: int,
    renormalize: bool, shared_w13: torch.Tensor | None = None, shared_w2: torch.Tensor | None = None,
    shared_gate: torch.Tensor | None = None,
) -> torch.Tensor:
    """A whole sparse MoE block after its router: routed experts plus the optional gated shared expert.

    Routing weights are cast to ``x``'s dtype before weighting (as transformers does); the shared expert is
    ``down(silu(gate(x)) * up(x))`` with ``shared_w13`` [2Is, H] (gate rows, then up) and ``shared_w2`` [H, Is],
    scaled by ``sigmoid(x . shared_gate)`` when a gate [1, H] is given. Each step rounds to ``x``'s dtype like
    the unfused layers do.
    """
    weights, ids = moe_topk_softmax(router_logits, top_k, renormalize)
    out = fused_moe(x, w13, w2, weights.to(x.dtype), ids)
    if shared_w13 is None or shared_w2 is None:
        return out
    shared = F.linear(silu_and_mul(F.linear(x, shared_w13)), shared_w2)
    if shared_gate is not None:
        shared = torch.sigmoid(F.linear(x, shared_gate.reshape(1, -1))) * shared
    return out + shared
