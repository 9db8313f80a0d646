"""GGUF files: config from the metadata, and tensors dequantized to float32 under HF names.

The config and the name mapping follow transformers' own GGUF loader (``load_gguf_checkpoint``), so a model
built from this checkpoint matches ``AutoModelForCausalLM.from_pretrained(dir, gguf_file=...)``. The file is
parsed once (see gguf_file.py); tensor bytes stay memory-mapped and are dequantized one at a time.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from gguf import MODEL_ARCH_NAMES, get_tensor_name_map
from transformers import AutoConfig, AutoModelForCausalLM, PretrainedConfig
from transformers.integrations.ggml import GGUF_CONFIG_DEFAULTS_MAPPING, GGUF_CONFIG_MAPPING

from revolta_engine.errors import ModelLoadError, UnsupportedModelError

from .gguf_file import GgufFile, read_gguf
from .hf_files import set_architectures

logger = logging.getLogger(__name__)

# llama.cpp architecture name -> transformers model_type where they differ (as transformers maps them).
_MODEL_TYPES = {"qwen2moe": "qwen2_moe", "qwen3moe": "qwen3_moe"}
# llama.cpp's convert script permutes q/k rows of these architectures for its rotary layout; undone here.
_PERMUTED_QK_ARCHS = {"llama"}
_TOKENIZER_IDS = {
    "bos_token_id": "tokenizer.ggml.bos_token_id",
    "eos_token_id": "tokenizer.ggml.eos_token_id",
    "unk_token_id": "tokenizer.ggml.unknown_token_id",
    "pad_token_id": "tokenizer.ggml.padding_token_id",
}
# Ids llama.cpp treats as end of generation besides eos (end of turn, end of message).
EXTRA_EOG_KEYS = ("tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id")


def open_gguf(path: Path) -> GgufFile:
    """Parse a GGUF file's header; raise ModelLoadError if it is not a readable GGUF file."""
    return read_gguf(path)


def gguf_scalar(gguf: GgufFile, key: str, default: Any = None) -> Any:
    """One metadata value as a Python value (string arrays such as the vocabulary are not kept)."""
    return gguf.metadata.get(key, default)


def gguf_config(reader: GgufFile, path: Path) -> PretrainedConfig:
    """Rebuild the transformers config from the metadata, as transformers' GGUF loader does."""
    arch = gguf_scalar(reader, "general.architecture")
    if not isinstance(arch, str):
        raise ModelLoadError(f"GGUF file {path} has no general.architecture in its metadata.")
    model_type = _MODEL_TYPES.get(arch, arch)
    if arch == "llama" and gguf_scalar(reader, "general.name") == "mistral":
        model_type = "mistral"  # transformers' rule: llama.cpp files mistral models as llama
    if model_type not in GGUF_CONFIG_MAPPING:
        raise UnsupportedModelError(f"GGUF architecture {arch!r} of {path} is not supported.")
    tensor_names = {t.name for t in reader.tensors}
    defaults = cast(dict[str, Any], GGUF_CONFIG_DEFAULTS_MAPPING.get(model_type, {}))
    mapping = cast(dict[str, Any], GGUF_CONFIG_MAPPING[model_type])
    values: dict[str, Any] = dict(defaults)
    values["model_type"] = model_type
    values["tie_word_embeddings"] = "output.weight" not in tensor_names
    name = gguf_scalar(reader, "general.name")
    if name is not None:
        values["_model_name_or_path"] = name
    for key, hf_key in mapping.items():
        value = gguf_scalar(reader, f"{arch}.{key}")
        if value is not None and hf_key not in (None, -1):
            values[hf_key] = value
    for hf_key, key in _TOKENIZER_IDS.items():
        value = gguf_scalar(reader, key)
        if value is not None:
            values[hf_key] = value
    if "vocab_size" not in values and reader.vocab_size is not None:
        values["vocab_size"] = reader.vocab_size
    try:
        config = AutoConfig.for_model(**values)
    except Exception as exc:
        raise UnsupportedModelError(f"Cannot build a {model_type!r} config from GGUF {path}: {exc}") from exc
    config.name_or_path = str(path)
    set_architectures(config)
    return config


class GgufWeights:
    """The tensors of a GGUF file, dequantized to float32 and renamed to the HF names transformers uses."""

    def __init__(self, reader: GgufFile, config: PretrainedConfig, path: Path) -> None:
        self.reader = reader
        self.config = config
        self.path = path
        self.arch = str(gguf_scalar(reader, "general.architecture"))
        self.name_map = _gguf_to_hf_names(config, self.arch)
        self._read: set[str] = set()

    def iter_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """Yield ``(hf_name, float32 tensor)``; GGUF tensors without an HF counterpart are skipped (logged)."""
        self._read.clear()
        for tensor in self.reader.tensors:
            hf_name = self.name_map.get(tensor.name)
            if hf_name is None:
                logger.debug("GGUF tensor %s has no transformers counterpart; skipped", tensor.name)
                continue
            weights = tensor.dequantize()
            if self.arch in _PERMUTED_QK_ARCHS and (".attn_q." in tensor.name or ".attn_k." in tensor.name):
                heads = self.config.num_attention_heads
                if ".attn_k." in tensor.name:
                    heads = self.config.num_key_value_heads
                weights = _reverse_permute(weights, heads)
            if not weights.flags.writeable:  # an F32 tensor is a view of the read-only memory map
                weights = weights.copy()
            yield hf_name, torch.from_numpy(np.ascontiguousarray(weights))
            self._read.add(tensor.name)

    def check_all_read(self) -> None:
        """Raise ModelLoadError naming a mapped GGUF tensor the last pass did not read."""
        unread = [t.name for t in self.reader.tensors if t.name in self.name_map and t.name not in self._read]
        if unread:
            raise ModelLoadError(
                f"GGUF tensors of {self.path} left unread: {unread[:5]} ({len(unread)} in all)."
            )


def _reverse_permute(weights: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's q/k row permutation (interleaved rotary halves -> HF's rotate_half layout)."""
    dim = weights.shape[0] // n_head // 2
    w = weights.reshape(n_head, dim, 2, *weights.shape[1:])
    return w.swapaxes(2, 1).reshape(weights.shape)


def _gguf_to_hf_names(config: PretrainedConfig, arch: str) -> dict[str, str]:
    """Map GGUF tensor names to the transformers model's parameter names (via gguf's tensor-name table)."""
    arch_ids = {name: arch_id for arch_id, name in MODEL_ARCH_NAMES.items()}
    if arch not in arch_ids:
        raise UnsupportedModelError(f"The installed gguf package does not know GGUF architecture {arch!r}.")
    table = get_tensor_name_map(arch_ids[arch], config.num_hidden_layers)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    mapping: dict[str, str] = {}
    for hf_name in model.state_dict():
        base, dot, suffix = hf_name.rpartition(".")
        if suffix not in ("weight", "bias"):
            base, dot, suffix = hf_name, "", ""
        gguf_name = table.get_name(base)
        if gguf_name is not None:
            mapping[gguf_name + dot + suffix] = hf_name
    if config.tie_word_embeddings:
        mapping.pop("output.weight", None)
    return mapping
