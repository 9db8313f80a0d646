"""The KV block pool: reference counts, an LRU free queue and the prefix-cache index."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass


@dataclass(eq=False)
class KVBlock:
    """One block of ``block_size`` token slots in every layer's KV cache."""

    block_id: int
    ref_cnt: int = 0
    block_hash: bytes | None = None


class BlockPool:
    """Owns every KV block. Block 0 is the null block (never handed out; padding points at it).

    Free blocks sit in an LRU queue; a free block that still holds a cached prefix keeps its hash until
    it is reused, so a later request can revive it with :meth:`touch`. Freed requests return their blocks
    tail first, so the end of a sequence is evicted before its (more shareable) beginning.
    """

    def __init__(self, num_blocks: int, enable_caching: bool) -> None:
        assert num_blocks >= 2, "the pool needs the null block plus at least one usable block"
        self.num_blocks = num_blocks
        self.enable_caching = enable_caching
        self.blocks = [KVBlock(i) for i in range(num_blocks)]
        self.null_block = self.blocks[0]
        self.null_block.ref_cnt = 1
        self._free: OrderedDict[int, KVBlock] = OrderedDict((b.block_id, b) for b in self.blocks[1:])
        self._cached: dict[bytes, KVBlock] = {}

    @property
    def num_usable_blocks(self) -> int:
        return self.num_blocks - 1

    def num_free_blocks(self) -> int:
        """Blocks that can be handed out now (free, possibly holding an evictable cached prefix)."""
        return len(self._free)

    def usage(self) -> float:
        """Fraction of usable blocks referenced by live requests."""
        return 1.0 - len(self._free) / self.num_usable_blocks

    def get_cached_block(self, block_hash: bytes) -> KVBlock | None:
        """The block holding this hash, if still cached."""
        return self._cached.get(block_hash)

    def allocate(self, n: int) -> list[KVBlock]:
        """Take ``n`` blocks from the head of the free queue, evicting their cached hashes."""
        if n > len(self._free):
            raise RuntimeError(f"asked for {n} KV blocks with only {len(self._free)} free")
        out = []
        for _ in range(n):
            _, block = self._free.popitem(last=False)
            self._evict(block)
            block.ref_cnt = 1
            out.append(block)
        return out

    def touch(self, blocks: list[KVBlock]) -> None:
        """Take a reference on cached blocks found by a prefix hit."""
        for block in blocks:
            if block.ref_cnt == 0:
                del self._free[block.block_id]
            block.ref_cnt += 1

    def free(self, blocks: list[KVBlock]) -> None:
        """Drop one reference on each block; blocks reaching zero join the free queue in the given order."""
        for block in blocks:
            block.ref_cnt -= 1
            assert block.ref_cnt >= 0, f"block {block.block_id} freed twice"
            if block.ref_cnt == 0:
                self._free[block.block_id] = block

    def cache_block(self, block: KVBlock, block_hash: bytes) -> bool:
        """Publish a full block under its chained hash (first writer wins); True if this block now holds it."""
        if not self.enable_caching or block.block_hash is not None:
            return False
        if block_hash in self._cached:
            return False
        block.block_hash = block_hash
        self._cached[block_hash] = block
        return True

    def reset_prefix_cache(self) -> bool:
        """Forget every cached hash; only allowed when no block is in use."""
        if len(self._free) != self.num_usable_blocks:
            return False
        for block in self.blocks[1:]:
            block.block_hash = None
        self._cached.clear()
        return True

    def _evict(self, block: KVBlock) -> None:
        if block.block_hash is not None:
            if self._cached.get(block.block_hash) is block:
                del self._cached[block.block_hash]
            block.block_hash = None
