"""Anthropic content blocks from chat output events: the streaming event sequence and the final blocks.

A :class:`BlockAssembler` turns the ordered reasoning / content / tool-call events of one answer into
``content_block_start`` / ``content_block_delta`` / ``content_block_stop`` events (thinking_delta, text_delta,
input_json_delta) and, at the same time, the list of finished blocks the non-streaming response returns.
"""

from __future__ import annotations

import uuid
from typing import Any

from revolta_api.chat_output import OutputEvent
from revolta_api.tool_parsers.arguments import arguments_object

_KINDS = {"reasoning": "thinking", "content": "text", "tool_call": "tool_use"}


def tool_use_id() -> str:
    """A fresh tool_use block id (Anthropic's ``toolu_`` prefix)."""
    return "toolu_" + uuid.uuid4().hex[:24]


class BlockAssembler:
    """Content blocks of one message, built event by event."""

    def __init__(self) -> None:
        self.blocks: list[dict[str, Any]] = []
        self._open: dict[str, Any] | None = None
        self._open_tool: int | None = None  # the tool call index the open tool_use block belongs to
        self._arguments: list[str] = []

    @property
    def has_tool_use(self) -> bool:
        """True when at least one tool_use block was produced."""
        return any(b["type"] == "tool_use" for b in self.blocks)

    def feed(self, event: OutputEvent) -> list[dict[str, Any]]:
        """Stream events (as dicts) for one output event."""
        kind = _KINDS[event.kind]
        out: list[dict[str, Any]] = []
        if kind == "tool_use":
            assert event.tool is not None
            if self._open is None or self._open["type"] != "tool_use" or self._open_tool != event.tool.index:
                out += self.close()
                out += self._start({"type": "tool_use", "id": tool_use_id(),
                                    "name": event.tool.name or "", "input": {}})
                self._open_tool = event.tool.index
            if event.tool.arguments:
                self._arguments.append(event.tool.arguments)
                out.append(self._delta({"type": "input_json_delta", "partial_json": event.tool.arguments}))
            return out
        if not event.text:
            return out
        if self._open is None or self._open["type"] != kind:
            out += self.close()
            out += self._start({"type": "thinking", "thinking": "", "signature": ""} if kind == "thinking"
                               else {"type": "text", "text": ""})
        if kind == "thinking":
            self._open["thinking"] += event.text  # type: ignore[index]
            out.append(self._delta({"type": "thinking_delta", "thinking": event.text}))
        else:
            self._open["text"] += event.text  # type: ignore[index]
            out.append(self._delta({"type": "text_delta", "text": event.text}))
        return out

    def close(self) -> list[dict[str, Any]]:
        """Close the open block (if any): its final events."""
        block = self._open
        if block is None:
            return []
        out: list[dict[str, Any]] = []
        if block["type"] == "thinking":
            # No signature can be verified here; the SDK expects the delta before the block ends.
            out.append(self._delta({"type": "signature_delta", "signature": ""}))
        elif block["type"] == "tool_use":
            block["input"] = arguments_object("".join(self._arguments))
            self._arguments = []
            self._open_tool = None
        out.append({"type": "content_block_stop", "index": len(self.blocks) - 1})
        self._open = None
        return out

    def _start(self, block: dict[str, Any]) -> list[dict[str, Any]]:
        self.blocks.append(block)
        self._open = block
        shown = dict(block)
        return [{"type": "content_block_start", "index": len(self.blocks) - 1, "content_block": shown}]

    def _delta(self, delta: dict[str, Any]) -> dict[str, Any]:
        return {"type": "content_block_delta", "index": len(self.blocks) - 1, "delta": delta}
