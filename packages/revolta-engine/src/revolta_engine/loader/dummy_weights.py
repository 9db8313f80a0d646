"""Random weights with a real checkpoint's names and shapes, for benchmarks without weight files."""

from __future__ import annotations

from collections.abc import Iterator

import torch
from transformers import AutoModelForCausalLM, PretrainedConfig


class DummyWeights:
    """Uniform random tensors in [-1e-3, 1e-3] (as vLLM's dummy format), one per transformers parameter.

    Shapes come from the transformers model built on the meta device; a tied ``lm_head.weight`` is left out,
    as a saved checkpoint would. The dtype is the config's ``dtype`` (float32 when unset).
    """

    def __init__(self, config: PretrainedConfig, seed: int = 0) -> None:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
        dtype = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None) or torch.float32
        if isinstance(dtype, str):
            dtype = getattr(torch, dtype)
        self.dtype: torch.dtype = dtype
        self.seed = seed
        self.shapes = {name: tuple(t.shape) for name, t in model.state_dict().items()}
        if getattr(config, "tie_word_embeddings", False):
            self.shapes.pop("lm_head.weight", None)

    def iter_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """Yield ``(name, random tensor)``; the same seed gives the same tensors."""
        generator = torch.Generator().manual_seed(self.seed)
        for name, shape in self.shapes.items():
            tensor = torch.empty(shape, dtype=torch.float32).uniform_(-1e-3, 1e-3, generator=generator)
            yield name, tensor.to(self.dtype)

    def check_all_read(self) -> None:
        """Nothing can be left unread: the tensors are made on demand."""
