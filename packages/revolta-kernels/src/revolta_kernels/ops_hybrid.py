"""Torch custom ops for hybrid and mixture-of-experts models (namespace ``revolta``).

Mixture-of-experts routing and expert GEMMs (and the whole routed + shared expert block, for decode),
causal conv1d with per-sequence state, the gated delta rule (Gated DeltaNet) with its gating, and gated
RMSNorm. As in :mod:`revolta_kernels.ops`, the default implementation is the pure-torch reference and every
op has a fake implementation for tracing; native CUDA kernels register in :mod:`revolta_kernels.native_hybrid`
and :mod:`revolta_kernels.native_moe`.
State tensors (conv tails, recurrent states) live in per-slot pools that the ops update in place;
``state_indices[b]`` is sequence ``b``'s slot. Snapshot arguments (``snapshot_seq``, ``snapshot_len``,
``snapshot_slot``; empty for none) also copy sequence ``snapshot_seq[i]``'s state after ``snapshot_len[i]``
of its new tokens into slot ``snapshot_slot[i]`` (prefix caching of hybrid models).
"""

from __future__ import annotations

import torch

from revolta_kernels.reference import conv1d as ref_conv
from revolta_kernels.reference import gdn as ref_gdn
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


@torch.library.custom_op(f"{LIB}::causal_conv1d", mutates_args=("conv_states",))
def causal_conv1d(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, conv_states: torch.Tensor,
    query_start_loc: torch.Tensor, state_indices: torch.Tensor, silu: bool,
    snapshot_seq: torch.Tensor, snapshot_len: torch.Tensor, snapshot_slot: torch.Tensor,
) -> torch.Tensor:
    """Depthwise causal conv of variable-length sequences (x [T, C], weight [C, K], states [S, C, K-1])."""
    return ref_conv.causal_conv1d(x, weight, bias, conv_states, query_start_loc, state_indices, silu,
                                  snapshot_seq, snapshot_len, snapshot_slot)


@causal_conv1d.register_fake
def _(x, weight, bias, conv_states, query_start_loc, state_indices, silu, snapshot_seq, snapshot_len,
      snapshot_slot):
    return torch.empty_like(x)


@torch.library.custom_op(f"{LIB}::causal_conv1d_update", mutates_args=("conv_states",))
def causal_conv1d_update(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                         conv_states: torch.Tensor, state_indices: torch.Tensor, silu: bool) -> torch.Tensor:
    """One token per sequence: x [B, C] -> [B, C], shifting each sequence's conv state."""
    return ref_conv.causal_conv1d_update(x, weight, bias, conv_states, state_indices, silu)


@causal_conv1d_update.register_fake
def _(x, weight, bias, conv_states, state_indices, silu):
    return torch.empty_like(x)


@torch.library.custom_op(f"{LIB}::gated_delta_rule_prefill", mutates_args=("states",))
def gated_delta_rule_prefill(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
    states: torch.Tensor, query_start_loc: torch.Tensor, state_indices: torch.Tensor, use_qk_l2norm: bool,
    snapshot_seq: torch.Tensor, snapshot_len: torch.Tensor, snapshot_slot: torch.Tensor,
) -> torch.Tensor:
    """Chunked gated delta rule of variable-length sequences -> [T, Hv, Dv]; states [S, Hv, Dk, Dv] float32."""
    return ref_gdn.gated_delta_rule_chunked(q, k, v, g, beta, states, query_start_loc, state_indices,
                                            use_qk_l2norm, snapshot_seq, snapshot_len, snapshot_slot)


@gated_delta_rule_prefill.register_fake
def _(q, k, v, g, beta, states, query_start_loc, state_indices, use_qk_l2norm, snapshot_seq, snapshot_len,
      snapshot_slot):
    return torch.empty_like(v)


@torch.library.custom_op(f"{LIB}::gated_delta_rule_decode", mutates_args=("states",))
def gated_delta_rule_decode(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                            beta: torch.Tensor, states: torch.Tensor, state_indices: torch.Tensor,
                            use_qk_l2norm: bool) -> torch.Tensor:
    """Recurrent gated delta rule, one token per sequence -> [B, Hv, Dv]."""
    return ref_gdn.gated_delta_rule_recurrent(q, k, v, g, beta, states, state_indices, use_qk_l2norm)


@gated_delta_rule_decode.register_fake
def _(q, k, v, g, beta, states, state_indices, use_qk_l2norm):
    return torch.empty_like(v)


@torch.library.custom_op(f"{LIB}::rms_norm_gated", mutates_args=())
def rms_norm_gated(x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``weight * rmsnorm(x) * silu(gate)`` over the last dimension."""
    return ref_gdn.rms_norm_gated(x, gate, weight, eps)


@rms_norm_gated.register_fake
def _(x, gate, weight, eps):
    return torch.empty_like(x)


@torch.library.custom_op(f"{LIB}::gdn_gating", mutates_args=())
def gdn_gating(a: torch.Tensor, b: torch.Tensor, a_log: torch.Tensor, dt_bias: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(g = -exp(A_log) * softplus(a + dt_bias) float32, beta = sigmoid(b))`` for a/b of shape [T, Hv]."""
    return ref_gdn.gdn_gating(a, b, a_log, dt_bias)


@gdn_gating.register_fake
def _(a, b, a_log, dt_bias):
    return a.new_empty(a.shape, dtype=torch.float32), b.new_empty(b.shape)


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


@torch.library.custom_op(f"{LIB}::moe_router_norm_topk", mutates_args=())
def moe_router_norm_topk(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, norm_weight: torch.Tensor,
                         eps: float, zero_centered: bool, top_k: int, renormalize: bool,
                         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(weights, ids, normed, h)``: :func:`moe_router_norm` followed by :func:`moe_topk_softmax` of its logits
    (float32 weights, int64 ids [T, top_k]) in one op -- the routing of a decode step's MoE block from its input
    and residual, with no launch between the router and the experts."""
    logits, normed, h = ref_moe.moe_router_norm(x, residual, weight, norm_weight, eps, zero_centered)
    weights, ids = ref_moe.moe_topk_softmax(logits, top_k, renormalize)
    return weights, ids, normed, h


@moe_router_norm_topk.register_fake
def _(x, residual, weight, norm_weight, eps, zero_centered, top_k, renormalize):
    shape = (x.shape[0], top_k)
    return (x.new_empty(shape, dtype=torch.float32), x.new_empty(shape, dtype=torch.int64), torch.empty_like(x),
            torch.empty_like(x))


@torch.library.custom_op(f"{LIB}::moe_block", mutates_args=())
def moe_block(x: torch.Tensor, router_logits: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, top_k: int,
              renormalize: bool, shared_w13: torch.Tensor | None, shared_w2: torch.Tensor | None,
              shared_gate: torch.Tensor | None) -> torch.Tensor:
    """Routing + routed SwiGLU experts + optional sigmoid-gated shared expert in one op (the decode path)."""
    return ref_moe.moe_block(x, router_logits, w13, w2, top_k, renormalize, shared_w13, shared_w2, shared_gate)


@moe_block.register_fake
def _(x, router_logits, w13, w2, top_k, renormalize, shared_w13, shared_w2, shared_gate):
    return torch.empty_like(x)


@torch.library.custom_op(f"{LIB}::gated_delta_rule_decode_fused", mutates_args=("states",))
def gated_delta_rule_decode_fused(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, a: torch.Tensor, b: torch.Tensor, a_log: torch.Tensor,
    dt_bias: torch.Tensor, z: torch.Tensor, norm_weight: torch.Tensor, eps: float, states: torch.Tensor,
    state_indices: torch.Tensor, use_qk_l2norm: bool,
) -> torch.Tensor:
    """A Gated DeltaNet decode step after the conv: gating, recurrent delta rule, gated RMSNorm -> [B, Hv, Dv]."""
    return ref_gdn.gated_delta_rule_decode_fused(q, k, v, a, b, a_log, dt_bias, z, norm_weight, eps, states,
                                                 state_indices, use_qk_l2norm)


@gated_delta_rule_decode_fused.register_fake
def _(q, k, v, a, b, a_log, dt_bias, z, norm_weight, eps, states, state_indices, use_qk_l2norm):
    return torch.empty_like(v)


@torch.library.custom_op(f"{LIB}::gated_delta_rule_decode_fused_conv", mutates_args=("conv_states", "states"))
def gated_delta_rule_decode_fused_conv(
    qkv: torch.Tensor, conv_weight: torch.Tensor, conv_states: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
    a_log: torch.Tensor, dt_bias: torch.Tensor, z: torch.Tensor, norm_weight: torch.Tensor, eps: float,
    states: torch.Tensor, state_indices: torch.Tensor, use_qk_l2norm: bool,
) -> torch.Tensor:
    """A Gated DeltaNet decode step from the pre-conv [q | k | v] rows: conv1d update (silu) + the fused step."""
    return ref_gdn.gated_delta_rule_decode_fused_conv(qkv, conv_weight, conv_states, a, b, a_log, dt_bias, z,
                                                      norm_weight, eps, states, state_indices, use_qk_l2norm)


@gated_delta_rule_decode_fused_conv.register_fake
def _(qkv, conv_weight, conv_states, a, b, a_log, dt_bias, z, norm_weight, eps, states, state_indices, use_qk_l2norm):
    return torch.empty_like(z)
