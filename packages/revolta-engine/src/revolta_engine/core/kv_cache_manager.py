"""Per-request KV block tables on top of the block pool, with prefix caching."""

from __future__ import annotations

from dataclasses import dataclass

from revolta_engine.core.block_hash import extend_block_hashes
from revolta_engine.core.block_pool import BlockPool, KVBlock
from revolta_engine.core.kv_connector import KVConnector
from revolta_engine.core.request import Request
from revolta_engine.core.state_slots import StateSlots


@dataclass
class PrefixCacheStats:
    """Cumulative prefix-cache lookups, in tokens."""

    queries: int = 0
    hits: int = 0
    external_queries: int = 0  # tokens looked up in the connector's tiers after the device cache missed
    external_hits: int = 0


class KVCacheManager:
    """Allocates blocks for requests and finds cached prefixes by chained block hash.

    With a ``connector`` (KV offload tiers), a prefix that misses the device cache is looked up there too:
    its blocks get fresh device blocks and are copied in (:meth:`take_transfers`) instead of recomputed, and
    every block that fills with computed tokens is handed to the connector to store.
    """

    def __init__(self, num_blocks: int, block_size: int, enable_caching: bool,
                 state_slots: StateSlots | None = None, connector: KVConnector | None = None) -> None:
        if connector is not None and (not enable_caching or state_slots is not None):
            raise ValueError("a KV connector needs prefix caching and a model without recurrent state")
        self.connector = connector
        self._fetched: dict[str, tuple[list[bytes], list]] = {}  # request -> blocks the connector returned
        self._saves: list[tuple[bytes, int]] = []  # (hash, block id) to store, in order
        self._loads: list[tuple[int, object]] = []  # (block id, fetched block) to copy in before the forward
        self.block_size = block_size
        self.state_slots = state_slots  # hybrid models: per-request recurrent state slots and snapshots
        self._hit_snapshot: dict[str, int] = {}
        self.enable_caching = enable_caching
        self.pool = BlockPool(num_blocks, enable_caching)
        self.req_blocks: dict[str, list[KVBlock]] = {}
        self._num_cached: dict[str, int] = {}  # full blocks of each request already published
        self.prefix_stats = PrefixCacheStats()
        # An MTP head's entry at a block's last position reads the token after it, which the block's hash does
        # not cover: a hit then stops one matched block early, whose first token is that token (vLLM does the same).
        self.drop_last_hit_block = False

    @property
    def capacity_tokens(self) -> int:
        return self.pool.num_usable_blocks * self.block_size

    def usage(self) -> float:
        return self.pool.usage()

    def _update_hashes(self, request: Request) -> None:
        extra = request.sampling_params.extra_args.get("cache_salt")
        extend_block_hashes(request.block_hashes, request.all_token_ids, self.block_size,
                            (extra,) if extra else ())
        if self.state_slots is not None:
            self.state_slots.bind_deferred(request.request_id, request.block_hashes)

    def find_cached_prefix(self, request: Request) -> tuple[list[KVBlock], int]:
        """Longest run of cached full blocks at the start of the request, and its length in tokens.

        At least one token is always left to compute, so the last position still gets its logits. A request
        that wants prompt logprobs takes no hits: every prompt position needs its logits.
        """
        if not self.enable_caching or request.sampling_params.prompt_logprobs is not None:
            return [], 0
        self._update_hashes(request)
        max_blocks = (request.num_tokens - 1) // self.block_size
        hits: list[KVBlock] = []
        for block_hash in request.block_hashes[:max_blocks]:
            block = self.pool.get_cached_block(block_hash)
            if block is None:
                break
            hits.append(block)
        if self.drop_last_hit_block:
            hits = hits[:-1]
        if self.state_slots is not None:
            hits = self._trim_to_snapshot(request, hits)
        self.prefix_stats.queries += request.num_tokens
        self.prefix_stats.hits += len(hits) * self.block_size
        num_fetched = 0
        if self.connector is not None and len(hits) < max_blocks:
            wanted = request.block_hashes[len(hits):max_blocks]
            earlier = self._fetched.get(request.request_id)
            # A request that waits for free blocks is looked up at every step: reuse what the tiers gave it
            # (files above all) as long as its device hits end at the same block.
            if earlier is None or earlier[0] != wanted[:len(earlier[0])] or not earlier[0]:
                fetched = self.connector.lookup(wanted)
                earlier = (wanted[:len(fetched)], fetched)
                self._fetched[request.request_id] = earlier
                self.prefix_stats.external_queries += len(wanted) * self.block_size
                self.prefix_stats.external_hits += len(fetched) * self.block_size
            num_fetched = len(earlier[1])
        return hits, (len(hits) + num_fetched) * self.block_size

    def _trim_to_snapshot(self, request: Request, hits: list[KVBlock]) -> list[KVBlock]:
        """Hybrid models can only resume where a state snapshot exists: the longest such hit."""
        assert self.state_slots is not None
        self._hit_snapshot.pop(request.request_id, None)
        for n in range(len(hits), 0, -1):
            slot = self.state_slots.snapshot(request.block_hashes[n - 1])
            if slot is not None:
                self._hit_snapshot[request.request_id] = slot
                return hits[:n]
        return []

    def allocate_slots(
        self, request: Request, num_new_tokens: int, cached_blocks: list[KVBlock] | None = None
    ) -> bool:
        """Make room for ``num_new_tokens`` more tokens after the computed ones; False if blocks run out.

        ``cached_blocks`` (admission only) are the device-cache hits of :meth:`find_cached_prefix`; the blocks
        the connector returned for the same request follow them and are queued to be copied in.
        """
        hashes, fetched = (self._fetched.get(request.request_id, ([], [])) if cached_blocks is not None
                           else ([], []))
        cached_blocks = cached_blocks or []
        blocks = self.req_blocks.get(request.request_id, [])
        num_cached_tokens = (len(cached_blocks) + len(fetched)) * self.block_size
        total = request.num_computed_tokens + num_cached_tokens + num_new_tokens
        needed = -(-total // self.block_size) - len(blocks) - len(cached_blocks)
        # Reviving a free cached block takes it out of the free queue too.
        revived = sum(1 for b in cached_blocks if b.ref_cnt == 0)
        if needed + revived > self.pool.num_free_blocks():
            return False
        self._fetched.pop(request.request_id, None)
        self.pool.touch(cached_blocks)
        blocks = blocks + cached_blocks
        if needed > 0:
            new_blocks = self.pool.allocate(needed)
            for block, block_hash, data in zip(new_blocks, hashes, fetched, strict=False):
                self._loads.append((block.block_id, data))
                self.pool.cache_block(block, block_hash)  # valid before any forward pass reads it
            blocks += new_blocks
        self.req_blocks[request.request_id] = blocks
        self._num_cached.setdefault(request.request_id, len(cached_blocks) + len(fetched))
        if self.state_slots is not None:
            snapshot = self._hit_snapshot.pop(request.request_id, None)
            self.state_slots.assign(request.request_id, snapshot if cached_blocks else None)
        return True

    def cache_full_blocks(self, request: Request) -> None:
        """Publish the request's blocks that became full of computed tokens."""
        if not self.enable_caching:
            return
        self._update_hashes(request)
        blocks = self.req_blocks[request.request_id]
        n_full = min(request.num_computed_tokens // self.block_size, len(request.block_hashes))
        start = self._num_cached.get(request.request_id, 0)
        for i in range(start, n_full):
            published = self.pool.cache_block(blocks[i], request.block_hashes[i])
            if published and self.connector is not None:
                self._saves.append((request.block_hashes[i], blocks[i].block_id))
        self._num_cached[request.request_id] = max(start, n_full)

    def take_transfers(self) -> tuple[list[tuple[bytes, int]], list[tuple[int, object]]]:
        """The queued stores ``(hash, block id)`` and loads ``(block id, fetched block)``, emptied.

        Run the stores first: a block freed and handed to a load in the same step must be read before it
        is overwritten.
        """
        saves, loads = self._saves, self._loads
        self._saves, self._loads = [], []
        return saves, loads

    def plan_snapshots(self, steps: list[tuple[Request, int]]) -> list[tuple[int, int, int]]:
        """For hybrid models: ``(sequence index, new tokens, slot)`` for every block that this pass fills.

        The state after that block is copied into a fresh snapshot slot, so later requests sharing the
        prefix can start from it. With asynchronous scheduling the block's last token may still be in flight
        (its hash unknown): the slot is taken now and keyed by the hash once the token arrives.
        """
        if self.state_slots is None or not self.enable_caching:
            return []
        bs = self.block_size
        out = []
        for i, (request, num_new) in enumerate(steps):
            start, end = request.num_computed_tokens, request.num_computed_tokens + num_new
            self._update_hashes(request)
            for boundary in range((start // bs + 1) * bs, end + 1, bs):
                block = boundary // bs - 1
                if block < len(request.block_hashes):
                    slot = self.state_slots.new_snapshot(request.block_hashes[block])
                elif (request.num_pending_tokens and block == len(request.block_hashes)
                      and boundary == request.num_tokens + request.num_pending_tokens):
                    slot = self.state_slots.new_deferred_snapshot(request.request_id, block)
                else:
                    break
                if slot is not None:
                    out.append((i, boundary - start, slot))
        return out

    def state_slot(self, request_id: str) -> int:
        """The state slot of a running request (hybrid models)."""
        assert self.state_slots is not None
        return self.state_slots.owner[request_id]

    def block_ids(self, request_id: str) -> list[int]:
        return [b.block_id for b in self.req_blocks.get(request_id, [])]

    def free(self, request: Request) -> None:
        """Release all of a request's blocks, tail first."""
        if self.enable_caching and request.request_id in self.req_blocks:
            # With asynchronous scheduling the last block may have been computed while its last token was in
            # flight: publish it (and key its state snapshot) now that the token is known.
            self.cache_full_blocks(request)
        blocks = self.req_blocks.pop(request.request_id, [])
        self._num_cached.pop(request.request_id, None)
        self._fetched.pop(request.request_id, None)
        self.pool.free(list(reversed(blocks)))
        self._hit_snapshot.pop(request.request_id, None)
        if self.state_slots is not None:
            self.state_slots.release(request.request_id)
