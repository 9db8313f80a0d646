"""Chained block hashes: the one identity of a full KV block across the GPU prefix cache and offload tiers.

``hash(block) = sha256(parent_hash || token ids || extra keys)``. The root is a fixed seed so hashes are
identical across processes and restarts (offload tiers on disk depend on that).
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Sequence

ROOT_HASH = hashlib.sha256(b"revolta-prefix-cache-v1").digest()


def hash_block(parent: bytes | None, token_ids: Sequence[int], extra_keys: tuple = ()) -> bytes:
    """Hash one full block given its parent's hash (None for the first block)."""
    h = hashlib.sha256(parent if parent is not None else ROOT_HASH)
    h.update(array("q", token_ids).tobytes())
    if extra_keys:
        h.update(repr(extra_keys).encode())
    return h.digest()


def extend_block_hashes(
    hashes: list[bytes], token_ids: Sequence[int], block_size: int, extra_keys: tuple = ()
) -> None:
    """Append hashes for every newly completed full block of ``token_ids`` to ``hashes`` in place."""
    n_full = len(token_ids) // block_size
    for i in range(len(hashes), n_full):
        parent = hashes[i - 1] if i else None
        hashes.append(hash_block(parent, token_ids[i * block_size:(i + 1) * block_size], extra_keys))
