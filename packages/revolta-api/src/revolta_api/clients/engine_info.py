"""Read the facts the HTTP layer needs off a loaded ``LLMEngine``."""

from __future__ import annotations

from typing import Any

from revolta_api.engine_client import EngineInfo


def engine_info(engine: Any, served_model_name: str | None = None) -> EngineInfo:
    """Collect an :class:`EngineInfo` from an ``LLMEngine`` (values of the config report shown as text)."""
    tokenizer = engine.tokenizer
    report = [(str(name), _show(value), str(source)) for name, value, source in engine.config_report()]
    return EngineInfo(
        served_model_name=served_model_name or engine.served_model_name,
        max_model_len=int(engine.max_model_len),
        kv_capacity_tokens=int(getattr(engine, "kv_capacity_tokens", 0)),
        eos_token_ids=sorted(int(t) for t in getattr(engine, "eos_token_ids", ()) or ()),
        config_report=report,
        chat_template=getattr(engine, "chat_template", None) or getattr(tokenizer, "chat_template", None),
        vocab_size=_vocab_size(engine),
        default_sampling=dict(getattr(engine, "default_sampling", None) or {}),
        max_logprobs=int(getattr(engine, "max_logprobs", 20)),
    )


def _show(value: Any) -> str:
    return value if isinstance(value, str) else repr(value)


def _vocab_size(engine: Any) -> int:
    """Token ids the model accepts: its embedding size, else the tokenizer's length."""
    size = getattr(getattr(engine, "hf_config", None), "vocab_size", None)
    if size is None and engine.tokenizer is not None:
        size = len(engine.tokenizer)
    return int(size or 0)
