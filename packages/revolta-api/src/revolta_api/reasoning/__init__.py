"""Reasoning parsers (``--reasoning-parser``): split thinking from the answer on the end-of-thinking token id."""

from __future__ import annotations

from revolta_api.reasoning.base import DeepSeekR1ReasoningParser, Qwen3ReasoningParser, ReasoningParser
from revolta_api.registry import lookup

REASONING_PARSERS: dict[str, type[ReasoningParser]] = {
    "qwen3": Qwen3ReasoningParser,
    "deepseek_r1": DeepSeekR1ReasoningParser,
}


def get_reasoning_parser(name: str) -> type[ReasoningParser]:
    """The parser class registered as ``name``; ValueError naming the choices otherwise."""
    return lookup(REASONING_PARSERS, name, "reasoning parser")


__all__ = ["REASONING_PARSERS", "ReasoningParser", "get_reasoning_parser"]
