"""Reference gated delta rule (Gated DeltaNet linear attention) over variable-length sequences.

Per value head the recurrent state ``S`` is a ``[Dk, Dv]`` float32 matrix. For each token:
``S <- exp(g) * S``; ``S <- S + k (beta * (v - S^T k))^T``; ``o = S^T q``, with ``q``, ``k`` optionally
L2-normalised and ``q`` scaled by ``Dk ** -0.5``. Prefill processes 64-token chunks at once (the UT
transform of DeltaNet); decode applies the step above once per sequence.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from revolta_kernels.reference.conv1d import _snapshots

CHUNK = 64


def l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """``x / sqrt(sum(x^2) + eps)`` over the last dimension (the FLA convention)."""
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + eps)


def _prepare(q, k, num_v_heads: int, use_qk_l2norm: bool):
    q, k = q.float(), k.float()
    rep = num_v_heads // q.shape[-2]
    if rep > 1:
        q, k = q.repeat_interleave(rep, dim=-2), k.repeat_interleave(rep, dim=-2)
    if use_qk_l2norm:
        q, k = l2norm(q), l2norm(k)
    return q * q.shape[-1] ** -0.5, k


def chunk_gated_delta(q, k, v, g, beta, state):
    """One sequence: q/k [n, H, Dk], v [n, H, Dv], g/beta [n, H] (float32, q scaled) and state [H, Dk, Dv].

    Returns (out [n, H, Dv], final state).
    """
    n = q.shape[0]
    out = torch.empty(n, v.shape[1], v.shape[2], dtype=torch.float32, device=v.device)
    for c0 in range(0, n, CHUNK):
        c1 = min(c0 + CHUNK, n)
        qc, kc, vc = (t[c0:c1].transpose(0, 1) for t in (q, k, v))  # [H, L, D]
        gc, bc = g[c0:c1].t(), beta[c0:c1].t()  # [H, L]
        cum = gc.cumsum(-1)
        length = c1 - c0
        lower = torch.ones(length, length, dtype=torch.bool, device=q.device).tril()
        decay = (cum[:, :, None] - cum[:, None, :]).masked_fill(~lower, float("-inf")).exp()  # [H, L, L]
        kb = kc * bc[..., None]
        system = (kb @ kc.transpose(1, 2)) * decay  # diagonal ignored: unit lower triangular solve
        u = torch.linalg.solve_triangular(system, vc * bc[..., None], upper=False, unitriangular=True)
        w = torch.linalg.solve_triangular(system, kb * cum.exp()[..., None], upper=False, unitriangular=True)
        v_new = u - w @ state
        attn = (qc @ kc.transpose(1, 2)) * decay
        out[c0:c1] = ((qc * cum.exp()[..., None]) @ state + attn @ v_new).transpose(0, 1)
        k_tail = kc * (cum[:, -1:] - cum).exp()[..., None]
        state = state * cum[:, -1].exp()[:, None, None] + k_tail.transpose(1, 2) @ v_new
    return out, state


def gated_delta_rule_chunked(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
    states: torch.Tensor, query_start_loc: torch.Tensor, state_indices: torch.Tensor, use_qk_l2norm: bool,
    snapshot_seq: torch.Tensor | None = None, snapshot_len: torch.Tensor | None = None,
    snapshot_slot: torch.Tensor | None = None,
) -> torch.Tensor:
    """Prefill of variable-length sequences from (and into) their state slots.

    q/k: [T, Hk, Dk]; v: [T, Hv, Dv]; g (log decay, <= 0) and beta: [T, Hv]; states: [S, Hv, Dk, Dv] float32,
    slot ``state_indices[b]`` read then overwritten with sequence ``b``'s final state. Snapshots as in
    :func:`revolta_kernels.reference.conv1d.causal_conv1d`. Returns [T, Hv, Dv] in v's dtype.
    """
    qf, kf = _prepare(q, k, v.shape[1], use_qk_l2norm)
    vf, gf, bf = v.float(), g.float(), beta.float()
    out = torch.empty_like(v)
    qsl = query_start_loc.tolist()
    snaps = _snapshots(snapshot_seq, snapshot_len, snapshot_slot)
    for i, slot in enumerate(state_indices.tolist()):
        start, end = qsl[i], qsl[i + 1]
        state = states[slot].float()
        cuts = sorted(snaps.get(i, ()))
        pos = 0
        for n, snap_slot in [*cuts, (end - start, -1)]:
            if n > pos:
                seg = slice(start + pos, start + n)
                o, state = chunk_gated_delta(qf[seg], kf[seg], vf[seg], gf[seg], bf[seg], state)
                out[seg] = o.to(out.dtype)
                pos = n
            if snap_slot >= 0:
                states[snap_slot] = state.to(states.dtype)
        states[slot] = state.to(states.dtype)
    return out


def gated_delta_rule_recurrent(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
    states: torch.Tensor, state_indices: torch.Tensor, use_qk_l2norm: bool,
) -> torch.Tensor:
    """Decode: one token per sequence (q/k [B, Hk, Dk], v [B, Hv, Dv], g/beta [B, Hv]); updates slots in place."""
    qf, kf = _prepare(q, k, v.shape[1], use_qk_l2norm)
    s = states.index_select(0, state_indices).float()  # [B, H, Dk, Dv]
    s = s * g.float().exp()[..., None, None]
    kv_mem = (s * kf[..., None]).sum(-2)
    delta = (v.float() - kv_mem) * beta.float()[..., None]
    s = s + kf[..., None] * delta[..., None, :]
    out = (s * qf[..., None]).sum(-2)
    states.index_copy_(0, state_indices, s.to(states.dtype))
    return out.to(v.dtype)


def rms_norm_gated(x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm of ``x`` times ``weight``, then times ``silu(gate)`` (norm before gate, as in Qwen3-Next)."""
    xf = x.float()
    normed = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    return ((weight * normed).float() * F.silu(gate.float())).to(x.dtype)


def gdn_gating(a: torch.Tensor, b: torch.Tensor, a_log: torch.Tensor, dt_bias: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """Decay and write strength of the gated delta rule from the ``a``/``b`` projections ([T, H] each).

    Returns ``g = -exp(A_log) * softplus(a + dt_bias)`` (float32 log decay) and ``beta = sigmoid(b)`` (b's dtype).
    """
    g = -a_log.float().exp() * F.softplus(a.float() + dt_bias)
    return g, b.sigmoid()


def gated_delta_rule_decode_fused(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, a: torch.Tensor, b: torch.Tensor, a_log: torch.Tensor,
    dt_bias: torch.Tensor, z: torch.Tensor, norm_weight: torch.Tensor, eps: float, states: torch.Tensor,
    state_indices: torch.Tensor, use_qk_l2norm: bool,
) -> torch.Tensor:
    """One decode step of a Gated DeltaNet layer after its conv: gating, the delta rule, the gated norm.

    Exactly :func:`gdn_gating`, then :func:`gated_delta_rule_recurrent`, then :func:`rms_norm_gated` with the
    output gate ``z`` [B, Hv, Dv]. Returns [B, Hv, Dv] in v's dtype; updates the state slots in place.
    """
    g, beta = gdn_gating(a, b, a_log, dt_bias)
    out = gated_delta_rule_recurrent(q, k, v, g, beta, states, state_indices, use_qk_l2norm)
    return rms_norm_gated(out, z, norm_weight, eps)


def gated_delta_rule_decode_fused_conv(
    qkv: torch.Tensor, conv_weight: torch.Tensor, conv_states: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
    a_log: torch.Tensor, dt_bias: torch.Tensor, z: torch.Tensor, norm_weight: torch.Tensor, eps: float,
    states: torch.Tensor, state_indices: torch.Tensor, use_qk_l2norm: bool,
) -> torch.Tensor:
    """The decode step with the layer's conv: :func:`causal_conv1d_update` (silu, no bias) of the pre-conv rows
    ``qkv`` [B, 2 Hk Dk + Hv Dv] (q | k | v), then :func:`gated_delta_rule_decode_fused`. Updates both state pools."""
    from revolta_kernels.reference.conv1d import causal_conv1d_update

    n, hv, dv = z.shape
    dk = states.shape[2]
    key_dim = (qkv.shape[1] - hv * dv) // 2
    y = causal_conv1d_update(qkv, conv_weight, None, conv_states, state_indices, True)
    q, k, v = y.split([key_dim, key_dim, hv * dv], dim=-1)
    return gated_delta_rule_decode_fused(q.reshape(n, key_dim // dk, dk), k.reshape(n, key_dim // dk, dk),
                                         v.reshape(n, hv, dv), a, b, a_log, dt_bias, z, norm_weight, eps, states,
                                         state_indices, use_qk_l2norm)
