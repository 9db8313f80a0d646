"""A GGUF file's metadata and tensor table, parsed once; tensor bytes stay memory-mapped until dequantized.

transformers' fast GGUF reader parses SmolLM2's header in ~0.02 s where ``gguf.GGUFReader`` takes ~2.5 s (it
builds a numpy view per vocabulary string), so it is used when present, with ``gguf.GGUFReader`` as fallback.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFReader
from gguf.quants import dequantize

from revolta_engine.errors import ModelLoadError


@dataclass(frozen=True)
class GgufTensor:
    """One tensor: GGUF name, ggml type, torch-order shape and its raw bytes (rows x row bytes)."""

    name: str
    ggml_type: GGMLQuantizationType
    shape: tuple[int, ...]
    data: np.ndarray

    def dequantize(self) -> np.ndarray:
        """The values as float32, shaped ``shape``."""
        values = dequantize(self.data, self.ggml_type)
        return np.asarray(values, dtype=np.float32).reshape(self.shape)


@dataclass(frozen=True)
class GgufFile:
    """Metadata (string arrays other than the vocabulary size are left out) and tensors of a GGUF file."""

    path: Path
    metadata: dict[str, Any]
    vocab_size: int | None
    tensors: tuple[GgufTensor, ...]

    @property
    def architecture(self) -> str:
        """``general.architecture``, e.g. ``"llama"``."""
        return str(self.metadata["general.architecture"])


def read_gguf(path: Path) -> GgufFile:
    """Parse ``path``; raise ModelLoadError when it is not a readable GGUF file."""
    try:
        try:
            from transformers.integrations.gguf.reader import GgufHeader, read_gguf_metadata
        except ImportError:
            return _read_with_gguf_reader(path)
        metadata, _ = read_gguf_metadata(str(path))
        header = GgufHeader.from_file(str(path))
    except ModelLoadError:
        raise
    except Exception as exc:  # struct.error / ValueError / OSError on a truncated or foreign file
        raise ModelLoadError(f"Cannot read GGUF file {path}: {exc}") from exc
    blob = np.memmap(path, mode="r", dtype=np.uint8)
    tensors = []
    for info in header.tensors:
        ggml_type = GGMLQuantizationType(info.ggml_type)
        start = header.data_start + info.offset
        tensors.append(
            GgufTensor(
                info.name,
                ggml_type,
                info.shape,
                _rows(blob[start : start + info.nbytes], info.shape, ggml_type),
            )
        )
    tokens = metadata.get("tokenizer.ggml.tokens")
    vocab = tokens if isinstance(tokens, int) else (len(tokens) if isinstance(tokens, list) else None)
    return GgufFile(path, metadata, vocab, tuple(tensors))


def _rows(raw: np.ndarray, shape: tuple[int, ...], ggml_type: GGMLQuantizationType) -> np.ndarray:
    block_elems, block_bytes = GGML_QUANT_SIZES[ggml_type]
    row_bytes = shape[-1] // block_elems * block_bytes
    expected = int(np.prod(shape[:-1], dtype=np.int64)) * row_bytes
    if raw.size != expected:
        raise ModelLoadError(f"GGUF tensor data is truncated ({raw.size} of {expected} bytes).")
    return raw.reshape(*shape[:-1], row_bytes)


def _read_with_gguf_reader(path: Path) -> GgufFile:
    reader = GGUFReader(path)
    big = {
        "tokenizer.ggml.tokens",
        "tokenizer.ggml.merges",
        "tokenizer.ggml.scores",
        "tokenizer.ggml.token_type",
    }
    metadata = {key: field.contents() for key, field in reader.fields.items() if key not in big}
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    tensors = tuple(
        GgufTensor(t.name, t.tensor_type, tuple(int(d) for d in reversed(t.shape)), t.data)
        for t in reader.tensors
    )
    return GgufFile(path, metadata, len(tokens.data) if tokens is not None else None, tensors)
