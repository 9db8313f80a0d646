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
        chat_template=getattr(tokenizer, "chat_template", None) if tokenizer is not None else None,
    )


def _show(value: Any) -> str:
    return value if isinstance(value, str) else repr(value)
