"""Qwen3.5 (dense and MoE): hybrid Gated DeltaNet / gated attention with split input projections.

Also loads the language model of the multimodal checkpoints (``Qwen3_5ForConditionalGeneration``, weights
under ``model.language_model.``): the vision tower is skipped, so image and video input is not supported.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator

import torch
from torch import nn
from transformers import PretrainedConfig

from revolta_engine.layers.mlp import SwiGLUMLP
from revolta_engine.layers.moe import SparseMoeBlock
from revolta_engine.models.hybrid import HybridForCausalLM

logger = logging.getLogger(__name__)

_SKIPPED_PREFIXES = ("mtp.", "model.visual.", "visual.")


class Qwen3_5ForCausalLM(HybridForCausalLM):
    """Qwen3_5ForCausalLM (dense Qwen3.5 / 3.6, e.g. 27B)."""

    def __init__(self, config: PretrainedConfig, max_position: int) -> None:
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        prefix = "model"
        if text is not config:
            logger.warning("Loading only the language model of this multimodal %s checkpoint: image and video "
                           "input is not supported", type(config).__name__)
            prefix = "model.language_model"
            # the quantization of a multimodal checkpoint is described once, at its top level
            if getattr(config, "quantization_config", None) and not getattr(text, "quantization_config", None):
                text.quantization_config = config.quantization_config
        super().__init__(text, max_position, prefix)

    def make_mlp(self, config: PretrainedConfig, layer_idx: int) -> nn.Module:
        return SwiGLUMLP(config.hidden_size, config.intermediate_size, quant=self.quant_config,
                         prefix=self.mlp_name(layer_idx), parallel="column")

    def rename(self, weights: Iterable[tuple[str, torch.Tensor]]) -> Iterator[tuple[str, torch.Tensor]]:
        for name, tensor in weights:
            if name.startswith(_SKIPPED_PREFIXES):
                continue
            if name.startswith("model.language_model."):
                name = "model." + name.removeprefix("model.language_model.")
            yield name, tensor


class Qwen3_5MoeForCausalLM(Qwen3_5ForCausalLM):
    """Qwen3_5MoeForCausalLM (Qwen3.5/3.6-35B-A3B, 122B-A10B): every layer's MLP is MoE + shared expert."""

    def make_mlp(self, config: PretrainedConfig, layer_idx: int) -> nn.Module:
        return SparseMoeBlock(config, renormalize=True, shared_expert=True, prefix=self.mlp_name(layer_idx))
