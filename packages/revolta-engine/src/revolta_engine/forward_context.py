"""The state one forward pass shares with every attention layer, set for exactly that pass."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

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
class ForwardContext:
    """Metadata and caches for the forward pass in flight."""

    attn: AttentionMetadata
    kv_caches: list[LayerKVCache]


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
