"""One KV block on the host, and its file form: safetensors bytes behind a magic tag and a sha256 checksum.

Files are written by the safetensors library. They are read back as views of the buffer the file was read into
(the format is a JSON header of dtypes, shapes and byte offsets): the library's own loader copies every tensor
while holding the GIL, which serialised the reader threads of a file-tier hit.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass

import torch
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

    @property
    def footprint(self) -> int:
        """Host memory the block holds: a pinned tensor comes from torch's caching host allocator, which rounds
        each allocation up to a power of two (a 28-layer block of 0.875 MiB takes 1 MiB)."""
        return sum(_pow2_ceil(t.numel() * t.element_size()) if t.is_pinned() else t.numel() * t.element_size()
                   for t in self.tensors.values())


def _pow2_ceil(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def encode_block(block_hash: bytes, fingerprint: str, block: HostBlock) -> list[bytes]:
    """The file of ``block`` as the pieces ``MAGIC``, ``sha256(payload)`` and a safetensors payload, to be
    written one after the other (joining them would copy the payload once more)."""
    payload = st_save({k: v.contiguous() for k, v in block.tensors.items()},
                      metadata={"block_hash": block_hash.hex(), "fingerprint": fingerprint})
    return [MAGIC, hashlib.sha256(payload).digest(), payload]


HEADER_BYTES = len(MAGIC) + _DIGEST


def decode_block(data: bytes, block_hash: bytes, fingerprint: str) -> HostBlock:
    """Parse and verify file bytes; raises :class:`CorruptBlockError` naming what is wrong."""
    return decode_pieces(data[:HEADER_BYTES], bytearray(data[HEADER_BYTES:]), block_hash, fingerprint)


def decode_pieces(header: bytes, payload: bytes | bytearray, block_hash: bytes, fingerprint: str) -> HostBlock:
    """:func:`decode_block` of a file read as its first ``HEADER_BYTES`` and the rest. The tensors are views of
    ``payload`` (no copy); pass a ``bytearray`` for writable tensors."""
    if len(header) < HEADER_BYTES or not header.startswith(MAGIC):
        raise CorruptBlockError("not a ReVolta KV block file (bad header)")
    if hashlib.sha256(payload).digest() != header[len(MAGIC):]:
        raise CorruptBlockError("checksum mismatch (the file is truncated or damaged)")
    try:
        entries, base = _safetensors_header(payload)
        meta = entries.pop("__metadata__", None) or {}
        tensors = {name: _view(payload, base, info) for name, info in entries.items()}
    except (ValueError, KeyError, TypeError) as e:
        raise CorruptBlockError(f"unreadable payload: {e}") from None
    if meta.get("block_hash") != block_hash.hex() or meta.get("fingerprint") != fingerprint:
        raise CorruptBlockError("the file holds another block or another model's cache layout")
    return HostBlock(tensors)


_DTYPES = {"F16": torch.float16, "BF16": torch.bfloat16, "F32": torch.float32, "F64": torch.float64,
           "I8": torch.int8, "U8": torch.uint8, "I16": torch.int16, "I32": torch.int32, "I64": torch.int64,
           "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2, "BOOL": torch.bool}


def _safetensors_header(payload: bytes | bytearray) -> tuple[dict, int]:
    """The header's entries and where the data starts (the format: 8-byte little-endian length, then JSON)."""
    n = int.from_bytes(payload[:8], "little")
    if not 0 < n <= len(payload) - 8:
        raise ValueError(f"header length {n} does not fit {len(payload)} bytes")
    entries = json.loads(bytes(payload[8:8 + n]))
    if not isinstance(entries, dict):
        raise ValueError("the header is not a JSON object")
    return entries, 8 + n


def _view(payload: bytes | bytearray, base: int, info: dict) -> torch.Tensor:
    """One tensor of the payload as a view of its bytes, after checking its offsets against its dtype and shape."""
    dtype = _DTYPES[info["dtype"]]
    shape = [int(d) for d in info["shape"]]
    start, end = (int(x) for x in info["data_offsets"])
    count = math.prod(shape)
    if start < 0 or end != start + count * dtype.itemsize or base + end > len(payload):
        raise ValueError(f"offsets {start}..{end} do not hold a {info['dtype']} tensor of shape {shape}")
    if count == 0:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(payload, dtype=dtype, count=count, offset=base + start).view(shape)
