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


def encode_block(block_hash: bytes, fingerprint: str, block: HostBlock) -> list[bytes]:
    """The file of ``block`` as the pieces ``MAGIC``, ``sha256(payload)`` and a safetensors payload, to be
    written one after the other (joining them would copy the payload once more)."""
    payload = st_save({k: v.contiguous() for k, v in block.tensors.items()},
                      metadata={"block_hash": block_hash.hex(), "fingerprint": fingerprint})
    return [MAGIC, hashlib.sha256(payload).digest(), payload]


HEADER_BYTES = len(MAGIC) + _DIGEST


def decode_block(data: bytes, block_hash: bytes, fingerprint: str) -> HostBlock:
    """Parse and verify file bytes; raises :class:`CorruptBlockError` naming what is wrong."""
    return decode_pieces(data[:HEADER_BYTES], data[HEADER_BYTES:], block_hash, fingerprint)


def decode_pieces(header: bytes, payload: bytes, block_hash: bytes, fingerprint: str) -> HostBlock:
    """:func:`decode_block` of a file read as its first ``HEADER_BYTES`` and the rest (no copy of the payload)."""
    if len(header) < HEADER_BYTES or not header.startswith(MAGIC):
        raise CorruptBlockError("not a ReVolta KV block file (bad header)")
    if hashlib.sha256(payload).digest() != header[len(MAGIC):]:
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
