"""The state one forward pass shares with every attention layer, set for exactly that pass."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch


@dataclass
class AttentionMetadata:
    """Where each new token goes in the paged cache and what it attends to.

    Sequence ``b`` owns query rows ``query_start_loc[b]:query_start_loc[b+1]`` (its last ``q_len`` tokens)
    and has ``context_lens[b]`` tokens in total including them.
    """

    slot_mapping: torch.Tensor  # [num_tokens] int64
    block_tables: torch.Tensor  # [num_seqs, max_blocks] int32
    context_lens: torch.Tensor  # [num_seqs] int32
    query_start_loc: torch.Tensor  # [num_seqs + 1] int32
    max_query_len: int
    max_context_len: int


@dataclass
class LayerKVCache:
    """One attention layer's paged cache (layout in :mod:`revolta_kernels.reference.cache`)."""

    key: torch.Tensor
    value: torch.Tensor
    k_scales: torch.Tensor  # [num_blocks, num_kv_heads, block_size] float32 for int8, else empty
    v_scales: torch.Tensor


@dataclass
class StateMetadata:
    """Which state slot each sequence of the batch uses (hybrid models' Gated DeltaNet layers).

    Sequences and their token rows are those of :class:`AttentionMetadata`. The snapshot tensors (empty
    when none) ask for sequence ``snapshot_seq[i]``'s state after ``snapshot_len[i]`` of its new tokens to
    be copied into slot ``snapshot_slot[i]`` as well (prefix caching).
    """

    state_indices: torch.Tensor  # [num_seqs] int64
    snapshot_seq: torch.Tensor  # [num_snapshots] int64
    snapshot_len: torch.Tensor
    snapshot_slot: torch.Tensor


@dataclass
class LayerStateCache:
    """One Gated DeltaNet layer's state pool: conv tails [S, C, K-1] and recurrent states [S, Hv, Dk, Dv]."""

    conv: torch.Tensor
    recurrent: torch.Tensor


@dataclass
class ForwardContext:
    """Metadata and caches for the forward pass in flight (``state*`` only for hybrid models)."""

    attn: AttentionMetadata
    kv_caches: list[LayerKVCache]
    state: StateMetadata | None = None
    state_caches: list[LayerStateCache] = field(default_factory=list)


_current: ForwardContext | None = None


@contextmanager
def forward_context(ctx: ForwardContext) -> Iterator[None]:
    """Make ``ctx`` visible to the layers for the duration of one forward pass."""
    global _current
    assert _current is None, "nested forward passes are not allowed"
    try:
        _current = ctx
        yield
    finally:
        _current = None


def get_forward_context() -> ForwardContext:
    """The context of the forward pass in flight."""
    assert _current is not None, "attention ran outside a forward_context"
    return _current
