"""The KV connector protocol: how full KV blocks leave the device cache for other tiers and come back.

A connector stores computed blocks under their chained block hash (:mod:`revolta_engine.core.block_hash`) and
hands them back when a later request's prefix hashes to the same values, so the engine copies them in instead
of recomputing them. The engine never imports an implementation: it imports the module its configuration
names (``revolta_offload`` by default, see :mod:`revolta_engine.engine.kv_offload_setup`), so the package
dependency points from the tiers to the engine.

Ordering contract: the engine calls :meth:`KVConnector.save` after the forward pass that computed the blocks
was issued and :meth:`KVConnector.load` before the forward pass that reads them, from the thread that issues
device work. A connector that copies on the engine's current CUDA stream (or synchronously on the CPU) is
therefore ordered with the model's own reads and writes of those blocks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass
class ConnectorStats:
    """Cumulative counters of a connector, in blocks and bytes."""

    blocks_saved: int = 0
    blocks_loaded: int = 0
    bytes_saved: int = 0
    bytes_loaded: int = 0
    tiers: dict[str, dict[str, int]] = field(default_factory=dict)  # per tier: blocks, bytes, capacity, ...


@runtime_checkable
class KVConnector(Protocol):
    """What the KV cache manager and the engine need from an external KV store."""

    def lookup(self, block_hashes: Sequence[bytes]) -> list[Any]:
        """Host copies of the leading blocks of ``block_hashes`` that the store holds, in order.

        Stops at the first hash it does not hold (or cannot read back intact). The returned objects are
        opaque to the engine and are passed back to :meth:`load` unchanged.
        """
        ...

    def load(self, block_ids: Sequence[int], blocks: Sequence[Any]) -> None:
        """Write blocks returned by :meth:`lookup` into these device blocks, before the next forward pass."""
        ...

    def save(self, block_hashes: Sequence[bytes], block_ids: Sequence[int]) -> None:
        """Store these computed device blocks under their hashes (may finish asynchronously)."""
        ...

    def stats(self) -> ConnectorStats:
        """A snapshot of the connector's counters."""
        ...

    def close(self) -> None:
        """Finish pending stores and release resources; idempotent."""
        ...


def run_transfers(connector: KVConnector | None, kv: Any) -> None:
    """Hand ``connector`` the blocks the KV cache manager ``kv`` queued to store, then copy the fetched blocks in
    (stores first: a block freed and reused for a load in the same step must be read before it is overwritten)."""
    if connector is None:
        return
    saves, loads = kv.take_transfers()
    if saves:
        connector.save([h for h, _ in saves], [b for _, b in saves])
    if loads:
        connector.load([b for b, _ in loads], [d for _, d in loads])
