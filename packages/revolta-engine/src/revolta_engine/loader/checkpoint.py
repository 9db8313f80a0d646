"""The loaded checkpoint: config, tokenizer, chat template and a stream of weights under HF names."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import torch
    from transformers import PretrainedConfig, PreTrainedTokenizerBase


class WeightSource(Protocol):
    """Where a checkpoint's tensors come from (safetensors files, a GGUF file, random numbers)."""

    def iter_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """Yield ``(hf_name, tensor)`` pairs, one tensor at a time."""
        ...

    def check_all_read(self) -> None:
        """Raise ModelLoadError naming what the last full pass left unread."""
        ...


@dataclass
class Checkpoint:
    """A model on disk, opened and validated; weights are read lazily by :meth:`iter_weights`.

    ``format`` is ``"safetensors"``, ``"gguf"`` or ``"dummy"``. ``hf_config`` is a transformers config with
    ``architectures`` set (for GGUF it is rebuilt from the file's metadata the way transformers does).
    ``tokenizer`` is None with ``skip_tokenizer_init`` or when the checkpoint ships none.
    ``eos_token_ids`` is the union of the eos ids of the config, generation_config and tokenizer
    (and, for GGUF, llama.cpp's end-of-turn ids ``eot``/``eom``).
    """

    path: Path
    format: str
    hf_config: PretrainedConfig
    tokenizer: PreTrainedTokenizerBase | None
    chat_template: str | None
    generation_config: dict
    eos_token_ids: set[int]
    weights: WeightSource = field(repr=False)

    def iter_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """Yield every tensor as ``(hf_name, tensor)``; GGUF tensors come dequantized to float32."""
        return self.weights.iter_weights()

    def check_all_shards_read(self) -> None:
        """Raise ModelLoadError if a shard (or an indexed tensor) was not read by :meth:`iter_weights`.

        Call it after consuming :meth:`iter_weights`; a loader that stopped early is caught here.
        """
        self.weights.check_all_read()
