"""KV offload under tensor parallelism: every rank keeps its own shard of each offloaded block in its own tiers
(its own CPU memory, its own file directory), and rank 0's scheduler sees one connector.

:class:`ParallelKVConnector` wraps rank 0's connector. Each call is sent to the workers first
(:class:`KVTransfer`), so every rank stores, looks up and loads the same blocks in the same order. A lookup
returns only the leading blocks that every rank holds (the minimum over the ranks). What it returns to the
scheduler are handles; each rank keeps its own copies of the looked-up blocks until rank 0 has dropped every
handle of that lookup (the scheduler may keep a waiting request's lookup for several steps, or drop it). The
release is sent with the next message.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from revolta_engine.core.kv_connector import ConnectorStats, KVConnector
from revolta_engine.parallel.communication import all_ranks_min, broadcast_object


@dataclass
class KVTransfer:
    """One connector call, as rank 0 sends it to the workers."""

    op: str  # "lookup", "load" or "save"
    lookup_id: int = -1  # lookup: the id its handles carry
    hashes: list[bytes] = field(default_factory=list)  # lookup, save
    block_ids: list[int] = field(default_factory=list)  # load, save
    blocks: list[tuple[int, int]] = field(default_factory=list)  # load: (lookup id, index in it)
    released: list[int] = field(default_factory=list)  # lookups rank 0 holds no handle of any more


class _BlockHandle:
    """Rank 0's stand-in for a looked-up block: which lookup, which block of it."""

    __slots__ = ("__weakref__", "index", "lookup_id")

    def __init__(self, lookup_id: int, index: int) -> None:
        self.lookup_id, self.index = lookup_id, index


class ParallelKVConnector:
    """Rank 0's connector when the model is split: its own tiers, with every call mirrored on the workers."""

    def __init__(self, inner: KVConnector) -> None:
        self.inner = inner
        self._next_id = 0
        self._held: dict[int, list[Any]] = {}  # lookup id -> rank 0's looked-up blocks
        self._live: dict[int, int] = {}  # lookup id -> handles not yet dropped
        self._released: list[int] = []

    def lookup(self, block_hashes: Sequence[bytes]) -> list[Any]:
        """The leading blocks every rank holds, as handles for :meth:`load`."""
        lookup_id, self._next_id = self._next_id, self._next_id + 1
        broadcast_object(KVTransfer("lookup", lookup_id, hashes=list(block_hashes), released=self._take_released()))
        found = self.inner.lookup(block_hashes)
        n = all_ranks_min(len(found))
        if n == 0:
            self._released.append(lookup_id)  # the workers may hold blocks of it that rank 0 lacks
            return []
        self._held[lookup_id], self._live[lookup_id] = found[:n], n
        handles = [_BlockHandle(lookup_id, i) for i in range(n)]
        for handle in handles:
            weakref.finalize(handle, self._drop_handle, lookup_id)
        return handles

    def load(self, block_ids: Sequence[int], blocks: Sequence[Any]) -> None:
        """Every rank writes its shard of these looked-up blocks into these device blocks."""
        refs = [(b.lookup_id, b.index) for b in blocks]
        broadcast_object(KVTransfer("load", block_ids=list(block_ids), blocks=refs, released=self._take_released()))
        self.inner.load(block_ids, [self._held[lookup_id][index] for lookup_id, index in refs])

    def save(self, block_hashes: Sequence[bytes], block_ids: Sequence[int]) -> None:
        """Every rank stores its shard of these device blocks."""
        broadcast_object(KVTransfer("save", hashes=list(block_hashes), block_ids=list(block_ids),
                                    released=self._take_released()))
        self.inner.save(block_hashes, block_ids)

    def stats(self) -> ConnectorStats:
        """Rank 0's counters (every rank stores the same blocks; bytes are rank 0's shard)."""
        return self.inner.stats()

    def close(self) -> None:
        """Finish rank 0's stores (each worker closes its own tiers when it stops)."""
        self.inner.close()

    def _drop_handle(self, lookup_id: int) -> None:
        self._live[lookup_id] -= 1
        if not self._live[lookup_id]:
            del self._live[lookup_id], self._held[lookup_id]
            self._released.append(lookup_id)

    def _take_released(self) -> list[int]:
        released, self._released = self._released, []
        return released


class KVTransferWorker:
    """A worker's side: its own connector over its shard of the cache, following rank 0's calls."""

    def __init__(self, inner: KVConnector) -> None:
        self.inner = inner
        self._held: dict[int, list[Any]] = {}

    def run(self, transfer: KVTransfer) -> None:
        """Do what rank 0 does with its own connector in the same call."""
        for lookup_id in transfer.released:
            self._held.pop(lookup_id, None)
        if transfer.op == "lookup":
            found = self.inner.lookup(transfer.hashes)
            n = all_ranks_min(len(found))
            if n:
                self._held[transfer.lookup_id] = found[:n]
        elif transfer.op == "load":
            self.inner.load(transfer.block_ids, [self._held[i][j] for i, j in transfer.blocks])
        elif transfer.op == "save":
            self.inner.save(transfer.hashes, transfer.block_ids)
        else:
            raise ValueError(f"unknown KV transfer {transfer.op!r}")

    def close(self) -> None:
        """Finish this rank's stores."""
        self.inner.close()
