"""Tool-call parsers (``--tool-call-parser``): find a model's tool calls in its output, streaming or not."""

from __future__ import annotations

from revolta_api.registry import lookup
from revolta_api.tool_parsers.base import ToolParser
from revolta_api.tool_parsers.json_calls import HermesToolParser, Llama3JsonToolParser
from revolta_api.tool_parsers.qwen3_coder import Qwen3CoderToolParser

TOOL_PARSERS: dict[str, type[ToolParser]] = {
    "hermes": HermesToolParser,
    "qwen3_coder": Qwen3CoderToolParser,
    "llama3_json": Llama3JsonToolParser,
}


def get_tool_parser(name: str) -> type[ToolParser]:
    """The parser class registered as ``name``; ValueError naming the choices otherwise."""
    return lookup(TOOL_PARSERS, name, "tool call parser")


__all__ = ["TOOL_PARSERS", "ToolParser", "get_tool_parser"]
