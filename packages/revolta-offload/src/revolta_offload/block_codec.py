"""One KV block on the host, and its file form: safetensors bytes behind a magic tag and a sha256 checksum."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

MAGIC = b"RVKVBLK1"
_DIGEST = 32


class CorruptBlockError(ValueError):
    """A stored block could not be read back intact (truncated, bit flips, or another block's file)."""


@dataclass
class HostBlock:
    """One block of every attention layer, in host memory.

    ``tensors`` maps ``key`` / ``value`` (and ``key_scale`` / ``value_scale`` for an int8 cache) to tensors of
    shape ``[layers, kv_heads, block_size, head_dim]`` (scales without ``head_dim``).
    """

    tensors: dict[str, torch.Tensor]

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors.values())


def encode_block(block_hash: bytes, fingerprint: str, block: HostBlock) -> bytes:
    """The file bytes of ``block``: ``MAGIC || sha256(payload) || payload`` with a safetensors payload."""
    payload = st_save({k: v.contiguous() for k, v in block.tensors.items()},
                      metadata={"block_hash": block_hash.hex(), "fingerprint": fingerprint})
    return MAGIC + hashlib.sha256(payload).digest() + payload


def decode_block(data: bytes, block_hash: bytes, fingerprint: str) -> HostBlock:
    """Parse and verify file bytes; raises :class:`CorruptBlockError` naming what is wrong."""
    head = len(MAGIC) + _DIGEST
    if len(data) < head or not data.startswith(MAGIC):
        raise CorruptBlockError("not a ReVolta KV block file (bad header)")
    payload = data[head:]
    if hashlib.sha256(payload).digest() != data[len(MAGIC):head]:
        raise CorruptBlockError("checksum mismatch (the file is truncated or damaged)")
    try:
        tensors = st_load(payload)
    except Exception as e:  # safetensors raises its own error types
        raise CorruptBlockError(f"unreadable payload: {e}") from None
    meta = _metadata(payload)
    if meta.get("block_hash") != block_hash.hex() or meta.get("fingerprint") != fingerprint:
        raise CorruptBlockError("the file holds another block or another model's cache layout")
    return HostBlock(tensors)


def _metadata(payload: bytes) -> dict[str, str]:
    """The safetensors header's ``__metadata__`` (the format: 8-byte little-endian length, then JSON)."""
    import json

    n = int.from_bytes(payload[:8], "little")
    return dict(json.loads(payload[8:8 + n]).get("__metadata__") or {})
