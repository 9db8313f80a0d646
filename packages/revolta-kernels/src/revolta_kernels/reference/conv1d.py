"""Reference causal depthwise conv1d over variable-length sequences, carrying each sequence's input tail."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def causal_conv1d(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    conv_states: torch.Tensor,
    query_start_loc: torch.Tensor,
    state_indices: torch.Tensor,
    silu: bool,
    snapshot_seq: torch.Tensor | None = None,
    snapshot_len: torch.Tensor | None = None,
    snapshot_slot: torch.Tensor | None = None,
) -> torch.Tensor:
    """Causal conv of each sequence's new tokens, continuing from its saved state.

    x: [T, C] new tokens of all sequences, sequence ``b`` owning rows ``query_start_loc[b]:[b+1]``;
    weight: [C, K]; conv_states: [S, C, K-1] the last K-1 inputs of each slot (zeros for a fresh sequence),
    updated in place for slot ``state_indices[b]``. Optional snapshots: after ``snapshot_len[i]`` of its new
    tokens, sequence ``snapshot_seq[i]``'s state is also written to slot ``snapshot_slot[i]``.
    Returns [T, C] (silu applied when ``silu``).
    """
    out = torch.empty_like(x)
    width = weight.shape[1] - 1
    w = weight.float()[:, None, :]
    b = None if bias is None else bias.float()
    qsl = query_start_loc.tolist()
    slots = state_indices.tolist()
    snaps = _snapshots(snapshot_seq, snapshot_len, snapshot_slot)
    for i, slot in enumerate(slots):
        start, end = qsl[i], qsl[i + 1]
        if end == start:
            continue
        full = torch.cat([conv_states[slot].float(), x[start:end].float().t()], dim=1)  # [C, K-1+n]
        y = F.conv1d(full[None], w, b, groups=full.shape[0])[0]  # [C, n]
        if silu:
            y = F.silu(y)
        out[start:end] = y.t().to(out.dtype)
        for n, snap_slot in snaps.get(i, ()):
            conv_states[snap_slot] = full[:, n:n + width].to(conv_states.dtype)
        conv_states[slot] = full[:, full.shape[1] - width:].to(conv_states.dtype)
    return out


def causal_conv1d_update(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, conv_states: torch.Tensor,
    state_indices: torch.Tensor, silu: bool,
) -> torch.Tensor:
    """One new token per sequence (decode): x [B, C] -> [B, C]; shifts the states of ``state_indices`` in place."""
    states = conv_states.index_select(0, state_indices)  # [B, C, K-1]
    full = torch.cat([states.float(), x.float()[:, :, None]], dim=2)  # [B, C, K]
    y = (full * weight.float()[None]).sum(-1)
    if bias is not None:
        y = y + bias.float()
    if silu:
        y = F.silu(y)
    conv_states.index_copy_(0, state_indices, full[:, :, 1:].to(conv_states.dtype))
    return y.to(x.dtype)


def _snapshots(seq, length, slot) -> dict[int, list[tuple[int, int]]]:
    out: dict[int, list[tuple[int, int]]] = {}
    if seq is None or length is None or slot is None:
        return out
    for s, n, d in zip(seq.tolist(), length.tolist(), slot.tolist(), strict=True):
        out.setdefault(s, []).append((n, d))
    return out
