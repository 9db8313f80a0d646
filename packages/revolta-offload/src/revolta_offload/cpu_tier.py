"""The CPU memory tier: blocks kept in host memory under a byte budget, least recently used evicted first."""

from __future__ import annotations

import threading
from collections import OrderedDict

from revolta_offload.block_codec import HostBlock


class CpuTier:
    """An LRU map from block hash to :class:`HostBlock`, bounded by ``capacity_bytes``; thread-safe."""

    def __init__(self, capacity_bytes: int) -> None:
        if capacity_bytes <= 0:
            raise ValueError(f"the CPU tier needs a positive capacity, got {capacity_bytes} bytes")
        self.capacity_bytes = capacity_bytes
        self._blocks: OrderedDict[bytes, HostBlock] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.evictions = 0

    def __contains__(self, block_hash: bytes) -> bool:
        with self._lock:
            return block_hash in self._blocks

    def __len__(self) -> int:
        return len(self._blocks)

    @property
    def nbytes(self) -> int:
        return self._bytes

    def get(self, block_hash: bytes) -> HostBlock | None:
        """The block, marked most recently used; None if not held."""
        with self._lock:
            block = self._blocks.get(block_hash)
            if block is not None:
                self._blocks.move_to_end(block_hash)
            return block

    def put(self, block_hash: bytes, block: HostBlock) -> bool:
        """Keep ``block``, evicting the least recently used blocks to fit; False if it alone is too large."""
        size = block.nbytes
        if size > self.capacity_bytes:
            return False
        with self._lock:
            old = self._blocks.pop(block_hash, None)
            if old is not None:
                self._bytes -= old.nbytes
            while self._bytes + size > self.capacity_bytes:
                _, evicted = self._blocks.popitem(last=False)
                self._bytes -= evicted.nbytes
                self.evictions += 1
            self._blocks[block_hash] = block
            self._bytes += size
        return True

    def stats(self) -> dict[str, int]:
        return {"blocks": len(self._blocks), "bytes": self._bytes, "capacity_bytes": self.capacity_bytes,
                "evictions": self.evictions}
