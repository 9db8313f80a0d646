"""Slots of the hybrid-model state pool: one per running request, plus prefix-cache snapshots.

Gated DeltaNet layers summarise a whole prefix in a fixed-size state, so unlike KV blocks a state cannot be
assembled from pieces: a prefix hit needs the state exactly at the end of the hit. Whenever a request's
computed tokens fill a KV block, the state at that block boundary is copied into a snapshot slot keyed by
the block's chained hash; a later request whose prefix hits that block starts from the snapshot.
"""

from __future__ import annotations

from collections import OrderedDict


class StateSlots:
    """Slot bookkeeping (no tensors): ``num_running`` request slots, then ``num_snapshots`` snapshot slots."""

    def __init__(self, num_running: int, num_snapshots: int) -> None:
        self.num_running = num_running
        self.num_snapshots = num_snapshots
        self._free = list(range(num_running - 1, -1, -1))
        self.owner: dict[str, int] = {}
        # request -> snapshot slot to start from (None: zeros); consumed before the request's first pass
        self.pending: dict[str, int | None] = {}
        self._snapshots: OrderedDict[bytes, int] = OrderedDict()  # block hash -> slot, least recent first
        self._free_snapshots = list(range(num_running + num_snapshots - 1, num_running - 1, -1))
        # asynchronous scheduling: snapshots taken of blocks whose last token was still in flight, so their
        # hash was unknown; request -> [(block index, slot)], bound to the hash once the token arrives
        self._deferred: dict[str, list[tuple[int, int]]] = {}

    @property
    def num_free(self) -> int:
        """Request slots not held by a running request."""
        return len(self._free)

    @property
    def num_slots(self) -> int:
        return self.num_running + self.num_snapshots

    def assign(self, request_id: str, start_from: int | None) -> None:
        """Give a newly admitted request a slot that starts fresh or from the snapshot slot ``start_from``."""
        if request_id in self.owner:
            return
        if not self._free:
            raise RuntimeError("no free state slot: more running requests than max_num_seqs")
        self.owner[request_id] = self._free.pop()
        self.pending[request_id] = start_from

    def release(self, request_id: str) -> None:
        slot = self.owner.pop(request_id, None)
        self.pending.pop(request_id, None)
        if slot is not None:
            self._free.append(slot)
        for _, snap in self._deferred.pop(request_id, []):  # never bound: the slot holds nothing anyone can find
            self._free_snapshots.append(snap)

    def take_pending(self) -> tuple[list[int], list[int | None]]:
        """Slots to initialise before the next forward pass, and their sources (None: zeros)."""
        slots = [self.owner[r] for r in self.pending]
        sources = list(self.pending.values())
        self.pending.clear()
        return slots, sources

    def snapshot(self, block_hash: bytes) -> int | None:
        """The snapshot slot holding the state after this block, if any (marks it recently used)."""
        slot = self._snapshots.get(block_hash)
        if slot is not None:
            self._snapshots.move_to_end(block_hash)
        return slot

    def new_snapshot(self, block_hash: bytes) -> int | None:
        """A slot to store the state after this block in, evicting the least recently used snapshot.

        None when the block already has one (or no snapshot slots exist).
        """
        if self.num_snapshots == 0 or block_hash in self._snapshots:
            return None
        slot = self._take_snapshot_slot()
        if slot is not None:
            self._snapshots[block_hash] = slot
        return slot

    def _take_snapshot_slot(self) -> int | None:
        if self._free_snapshots:
            return self._free_snapshots.pop()
        if self._snapshots:
            return self._snapshots.popitem(last=False)[1]
        return None  # every snapshot slot waits for its hash

    def new_deferred_snapshot(self, request_id: str, block: int) -> int | None:
        """A slot for the state after ``block`` of a request whose last token in that block is still in
        flight (asynchronous scheduling): it is keyed by the block's hash once :meth:`bind_deferred` sees it.
        """
        if self.num_snapshots == 0 or any(b == block for b, _ in self._deferred.get(request_id, [])):
            return None
        slot = self._take_snapshot_slot()
        if slot is not None:
            self._deferred.setdefault(request_id, []).append((block, slot))
        return slot

    def bind_deferred(self, request_id: str, block_hashes: list[bytes]) -> None:
        """Key the request's deferred snapshots whose block hashes are known now."""
        waiting = self._deferred.get(request_id)
        if not waiting:
            return
        left = []
        for block, slot in waiting:
            if block >= len(block_hashes):
                left.append((block, slot))
            elif block_hashes[block] in self._snapshots:  # another request stored this block meanwhile
                self._free_snapshots.append(slot)
            else:
                self._snapshots[block_hashes[block]] = slot
        if left:
            self._deferred[request_id] = left
        else:
            del self._deferred[request_id]
