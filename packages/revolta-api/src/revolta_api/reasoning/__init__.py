"""Reasoning parsers (``--reasoning-parser``): split thinking from the answer on the end-of-thinking token id."""

from __future__ import annotations

from revolta_api.reasoning.base import DeepSeekR1ReasoningParser, Qwen3ReasoningParser, ReasoningParser

REASONING_PARSERS: dict[str, type[ReasoningParser]] = {
    "qwen3": Qwen3ReasoningParser,
    "deepseek_r1": DeepSeekR1ReasoningParser,
}


def get_reasoning_parser(name: str) -> type[ReasoningParser]:
    """The parser class registered as ``name``; ValueError naming the choices otherwise."""
    try:
        return REASONING_PARSERS[name]
    except KeyError:
        raise ValueError(f"unknown reasoning parser {name!r}; choose one of "
                         f"{', '.join(sorted(REASONING_PARSERS))}") from None


__all__ = ["REASONING_PARSERS", "ReasoningParser", "get_reasoning_parser"]
