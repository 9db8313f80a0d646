"""The CPU memory tier: blocks kept in host memory under a byte budget, least recently used evicted first."""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict

import torch

from revolta_offload.block_codec import HostBlock

logger = logging.getLogger(__name__)


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
        size = block.footprint
        if size > self.capacity_bytes:
            return False
        with self._lock:
            old = self._blocks.pop(block_hash, None)
            if old is not None:
                self._bytes -= old.footprint
            while self._bytes + size > self.capacity_bytes:
                _, evicted = self._blocks.popitem(last=False)
                self._bytes -= evicted.footprint
                self.evictions += 1
            self._blocks[block_hash] = block
            self._bytes += size
        return True

    def stats(self) -> dict[str, int]:
        return {"blocks": len(self._blocks), "bytes": self._bytes, "capacity_bytes": self.capacity_bytes,
                "evictions": self.evictions}


class HostCopier:
    """Makes the compact host copies the CPU tier keeps: in pinned memory when ``pin``, so that a hit is copied
    to the GPU straight from each block; in pageable memory otherwise or once pinning has failed."""

    def __init__(self, pin: bool) -> None:
        self.pin = pin
        self._lock = threading.Lock()

    def copy(self, t: torch.Tensor) -> torch.Tensor:
        """A contiguous copy of the host tensor ``t`` (pinned if pinning is on and works)."""
        if self.pin:
            try:
                # torch.empty(pin_memory=True) draws on torch's caching host allocator: an evicted block's
                # memory is reused for the next one instead of being pinned again, which is slow. That allocator
                # rounds sizes up to a power of two; the tier counts blocks at that size (HostBlock.footprint).
                return torch.empty(t.shape, dtype=t.dtype, pin_memory=True).copy_(t)
            except RuntimeError as e:
                self._stop_pinning(e)
        return t.clone(memory_format=torch.contiguous_format)

    def block(self, block: HostBlock) -> HostBlock:
        """``block`` itself if it needs no copy (already pinned, or pinning is off), else a pinned copy."""
        if not self.pin or all(t.is_pinned() for t in block.tensors.values()):
            return block
        return HostBlock({name: self.copy(t) for name, t in block.tensors.items()})

    def _stop_pinning(self, error: RuntimeError) -> None:
        with self._lock:
            if not self.pin:
                return
            self.pin = False
        logger.warning("KV offload: cannot lock more host memory for the CPU tier (%s); keeping its blocks in "
                       "ordinary memory instead, which makes loading them back to the GPU slower", error)
