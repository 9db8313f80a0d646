"""``max_model_len`` against the context the model was trained for (vLLM's check, and its escape hatch)."""

from __future__ import annotations

from typing import Any

from revolta_engine import envs
from revolta_engine.config.sources import ConfigResolver
from revolta_engine.errors import InvalidRequestError

# Set to 1 to allow a max_model_len past what the model was trained for (vLLM's VLLM_ALLOW_LONG_MAX_MODEL_LEN too).
ALLOW_LONG_ENV = envs.ALLOW_LONG_MAX_MODEL_LEN.name


def trained_context_length(text_config: Any) -> int:
    """The longest context the model was trained or scaled for: ``max_position_embeddings``, times the rope scaling
    factor of linear / dynamic / yarn scaling (yarn from ``original_max_position_embeddings``), as vLLM derives it;
    llama3 and longrope configs already state their scaled length."""
    length = int(getattr(text_config, "max_position_embeddings", 2048))
    params = getattr(text_config, "rope_parameters", None) or getattr(text_config, "rope_scaling", None) or {}
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type not in ("default", "llama3", "longrope", "su", "mrope") and params.get("factor"):
        if rope_type == "yarn":
            length = int(params.get("original_max_position_embeddings") or length)
        length = int(length * float(params["factor"]))
    return length


def resolve_max_model_len(cfg: ConfigResolver, text_config: Any) -> int:
    """``max_model_len`` (default: the model's ``max_position_embeddings``); refused past the trained context length
    unless REVOLTA_ALLOW_LONG_MAX_MODEL_LEN=1, since positions beyond it give wrong outputs (vLLM does the same)."""
    max_len = int(cfg.resolve("max_model_len", int(getattr(text_config, "max_position_embeddings", 2048))))
    if max_len < 2:
        raise InvalidRequestError(f"max_model_len must be at least 2, got {max_len}", param="max_model_len")
    trained = trained_context_length(text_config)
    if max_len > trained and not envs.ALLOW_LONG_MAX_MODEL_LEN.get():
        raise InvalidRequestError(f"max_model_len {max_len} is longer than the {trained} positions this model was "
                                  f"trained for (max_position_embeddings and rope scaling in its config); outputs past "
                                  f"them are wrong. Lower --max-model-len, or set {ALLOW_LONG_ENV}=1 to run it anyway",
                                  param="max_model_len")
    return max_len
