"""Checkpoint loading: HF safetensors directories (single file, sharded index, shards in subfolders), GGUF
files (config, tokenizer, chat template and dequantized weights from the file) and dummy random weights."""

from __future__ import annotations

from .checkpoint import Checkpoint, WeightSource
from .embedded import default_model
from .load import LOAD_FORMATS, load_checkpoint

__all__ = ["LOAD_FORMATS", "Checkpoint", "WeightSource", "default_model", "load_checkpoint"]
