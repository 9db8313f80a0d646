"""What every tool-call parser shares: the tools offered, call numbering, and the events it emits."""

from __future__ import annotations

import uuid
from typing import Any

from revolta_api.chat_output import OutputEvent, ToolCallDelta


def tool_call_id() -> str:
    """A fresh tool call id (OpenAI's ``call_`` prefix; the Anthropic route gives its own ``toolu_`` ids)."""
    return "call_" + uuid.uuid4().hex[:24]


def _trailing_prefix(text: str, tag: str) -> int:
    """Length of the longest tail of ``text`` that is a proper prefix of ``tag``."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-n:]):
            return n
    return 0


class ToolParser:
    """Streaming tool-call extraction from content text; subclasses implement :meth:`feed` and :meth:`finish`.

    ``tools`` are the request's tools in OpenAI function format (their JSON schemas type the arguments of
    parsers whose models write untyped values). A parser never raises on model output: what it cannot read as
    a call is returned as content text.
    """

    def __init__(self, tokenizer: Any, tools: list[dict[str, Any]]) -> None:
        self.tokenizer = tokenizer
        self.schemas: dict[str, dict[str, Any]] = {
            t["function"]["name"]: t["function"].get("parameters") or {} for t in tools if "function" in t}
        self.count = 0  # calls started so far
        self.held = ""  # content held back (could be the start of a tag)

    def feed(self, text: str) -> list[OutputEvent]:
        """Events for newly generated content text."""
        raise NotImplementedError

    def finish(self) -> list[OutputEvent]:
        """Events for what is still held when generation ends (a call cut short stays a call)."""
        raise NotImplementedError

    def _start(self, name: str) -> OutputEvent:
        self.count += 1
        return OutputEvent("tool_call", tool=ToolCallDelta(index=self.count - 1, id=tool_call_id(), name=name))

    def _args(self, text: str) -> list[OutputEvent]:
        if not text:
            return []
        return [OutputEvent("tool_call", tool=ToolCallDelta(index=self.count - 1, arguments=text))]

    @staticmethod
    def _content(text: str) -> list[OutputEvent]:
        return [OutputEvent("content", text)] if text else []

    def _text_until(self, text: str, tag: str) -> tuple[list[OutputEvent], str | None]:
        """Content up to ``tag``: (events, text after the tag) once found, else (events, None) holding a tail
        that may begin the tag or that is whitespace right before it (dropped if the tag follows)."""
        buf = self.held + text
        pos = buf.find(tag)
        if pos >= 0:
            self.held = ""
            before = buf[:pos]
            return self._content(before.rstrip()), buf[pos + len(tag):]
        keep = _trailing_prefix(buf, tag)
        body = buf[:len(buf) - keep]
        stripped = body.rstrip()
        self.held = body[len(stripped):] + buf[len(buf) - keep:]
        return self._content(stripped), None

    def _flush_text(self) -> list[OutputEvent]:
        held, self.held = self.held, ""
        return self._content(held if not self.count or held.strip() else "")
