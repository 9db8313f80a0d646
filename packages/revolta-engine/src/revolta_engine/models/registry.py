"""Maps HF ``architectures`` names to model classes."""

from __future__ import annotations

from torch import nn
from transformers import PretrainedConfig

from revolta_engine.errors import UnsupportedModelError
from revolta_engine.models.llama import LlamaForCausalLM
from revolta_engine.models.qwen2 import Qwen2ForCausalLM
from revolta_engine.models.qwen3 import Qwen3ForCausalLM

MODEL_REGISTRY: dict[str, type[nn.Module]] = {
    "LlamaForCausalLM": LlamaForCausalLM,
    "Qwen2ForCausalLM": Qwen2ForCausalLM,
    "Qwen3ForCausalLM": Qwen3ForCausalLM,
}


def resolve_model_class(config: PretrainedConfig) -> type[nn.Module]:
    """The class for the first supported entry of ``config.architectures``."""
    archs = list(getattr(config, "architectures", None) or [])
    for arch in archs:
        if arch in MODEL_REGISTRY:
            return MODEL_REGISTRY[arch]
    raise UnsupportedModelError(
        f"model architecture(s) {archs or '(none given in config.json)'} are not supported; "
        f"supported: {', '.join(sorted(MODEL_REGISTRY))}"
    )
