"""Responses output items from chat output events: the streaming events and the finished items.

Reasoning becomes a ``reasoning`` item, content an assistant ``message`` with one ``output_text`` part, and each
tool call a ``function_call`` item, in the order the model produced them.
"""

from __future__ import annotations

import uuid
from typing import Any

from revolta_api.chat_output import OutputEvent


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


class ItemAssembler:
    """The output items of one response, built event by event."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []
        self._open: dict[str, Any] | None = None
        self._tool_index: int | None = None

    @property
    def index(self) -> int:
        return len(self.items) - 1

    def feed(self, event: OutputEvent) -> list[dict[str, Any]]:
        """Stream events (without sequence numbers) for one output event."""
        if event.kind == "tool_call":
            assert event.tool is not None
            out: list[dict[str, Any]] = []
            if self._open is None or self._open["type"] != "function_call" or self._tool_index != event.tool.index:
                out += self.close()
                out += self._start({"type": "function_call", "id": _id("fc"), "call_id": event.tool.id or _id("call"),
                                    "name": event.tool.name or "", "arguments": "", "status": "in_progress"})
                self._tool_index = event.tool.index
            if event.tool.arguments:
                self._open["arguments"] += event.tool.arguments  # type: ignore[index]
                out.append({"type": "response.function_call_arguments.delta", "item_id": self._open["id"],  # type: ignore[index]
                            "output_index": self.index, "delta": event.tool.arguments})
            return out
        if not event.text:
            return []
        kind = "reasoning" if event.kind == "reasoning" else "message"
        out = []
        if self._open is None or self._open["type"] != kind:
            out += self.close()
            if kind == "reasoning":
                out += self._start({"type": "reasoning", "id": _id("rs"), "summary": [], "content": [],
                                    "status": "in_progress"})
            else:
                out += self._start({"type": "message", "id": _id("msg"), "role": "assistant", "content": [],
                                    "status": "in_progress"})
                out.append(self._part_event("response.content_part.added", ""))
            self._open["text"] = ""  # type: ignore[index]
        item = self._open
        assert item is not None
        item["text"] += event.text
        delta_type = "response.reasoning_text.delta" if kind == "reasoning" else "response.output_text.delta"
        delta: dict[str, Any] = {"type": delta_type, "item_id": item["id"], "output_index": self.index,
                                 "content_index": 0, "delta": event.text}
        if kind == "message":
            delta["logprobs"] = []
        out.append(delta)
        return out

    def close(self) -> list[dict[str, Any]]:
        """Finish the open item (if any): its final events."""
        item = self._open
        if item is None:
            return []
        self._open = None
        out: list[dict[str, Any]] = []
        if item["type"] == "function_call":
            self._tool_index = None
            out.append({"type": "response.function_call_arguments.done", "item_id": item["id"],
                        "output_index": self.index, "name": item["name"], "arguments": item["arguments"]})
        else:
            text = item.pop("text")
            item["content"] = _content(item["type"], text)
            if item["type"] == "reasoning":
                out.append({"type": "response.reasoning_text.done", "item_id": item["id"], "output_index": self.index,
                            "content_index": 0, "text": text})
            else:
                out.append({"type": "response.output_text.done", "item_id": item["id"], "output_index": self.index,
                            "content_index": 0, "text": text, "logprobs": []})
                out.append(self._part_event("response.content_part.done", text, item))
        item["status"] = "completed"
        out.append({"type": "response.output_item.done", "output_index": self.index, "item": dict(item)})
        return out

    def snapshot(self) -> list[dict[str, Any]]:
        """The items so far in their API shape: the open one with its text so far, still in progress."""
        shown = []
        for item in self.items:
            if item is self._open and "text" in item:
                item = {**{k: v for k, v in item.items() if k != "text"}, "content": _content(item["type"], item["text"])}
            shown.append(dict(item))
        return shown

    def _start(self, item: dict[str, Any]) -> list[dict[str, Any]]:
        self.items.append(item)
        self._open = item
        return [{"type": "response.output_item.added", "output_index": self.index, "item": dict(item)}]

    def _part_event(self, kind: str, text: str, item: dict[str, Any] | None = None) -> dict[str, Any]:
        item = item or self._open
        assert item is not None
        return {"type": kind, "item_id": item["id"], "output_index": self.index, "content_index": 0,
                "part": {"type": "output_text", "text": text, "annotations": []}}


def _content(kind: str, text: str) -> list[dict[str, Any]]:
    """The content parts of a reasoning or message item holding ``text``."""
    if kind == "reasoning":
        return [{"type": "reasoning_text", "text": text}]
    return [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
