"""Torch custom ops of Gated DeltaNet layers (namespace ``revolta``).

Causal conv1d with per-sequence state, the gated delta rule (prefill and decode) with its gating, gated RMSNorm, and
the fused decode step (gating + delta rule + gated norm, optionally with the conv). As in :mod:`revolta_kernels.ops`,
the default implementation is the pure-torch reference and every op has a fake implementation for tracing; native
CUDA kernels register in :mod:`revolta_kernels.native_gdn`.
State tensors (conv tails, recurrent states) live in per-slot pools that the ops update in place;
``state_indices[b]`` is sequence ``b``'s slot. Snapshot arguments (``snapshot_seq``, ``snapshot_len``,
``snapshot_slot``; empty for none) also copy sequence ``snapshot_seq[i]``'s state after ``snapshot_len[i]``
of its new tokens into slot ``snapshot_slot[i]`` (prefix caching of hybrid models).
"""

from __future__ import annotations

import torch

from revolta_kernels.reference import conv1d as ref_conv
from revolta_kernels.reference import gdn as ref_gdn

LIB = "revolta"

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
