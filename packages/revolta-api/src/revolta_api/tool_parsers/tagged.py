"""The loop of formats that wrap each call in an open and a close tag, with content text between the calls."""

from __future__ import annotations

from typing import Any

from revolta_api.chat_output import OutputEvent
from revolta_api.tool_parsers.base import ToolParser


class TaggedCallParser(ToolParser):
    """Calls written as ``open_tag ... close_tag``; what lies between calls is content.

    States: ``text`` (content, watching for ``open_tag``), ``tail`` (the call is read: skip to ``close_tag``),
    ``whole`` (the block did not stream as a call: it is read whole at ``close_tag``); every other state is
    inside a call and belongs to :meth:`_read_call` (``head`` is the first, right after ``open_tag``).
    """

    open_tag = ""
    close_tag = ""

    def __init__(self, tokenizer: Any, tools: list[dict[str, Any]]) -> None:
        super().__init__(tokenizer, tools)
        self.state = "text"
        self.buf = ""

    def _read_call(self) -> tuple[list[OutputEvent], bool]:
        """One step inside a call over ``self.buf``: (events, whether more text is needed to go on)."""
        raise NotImplementedError

    def _whole_block(self, body: str) -> list[OutputEvent]:
        """Events for a block read whole (``body``: what stood between the tags)."""
        raise NotImplementedError

    def _cut_call(self) -> list[OutputEvent]:
        """Events that close a call cut short by the end of generation (inside :meth:`_read_call`'s states)."""
        raise NotImplementedError

    def feed(self, text: str) -> list[OutputEvent]:
        """See :meth:`ToolParser.feed`."""
        events: list[OutputEvent] = []
        if self.state == "text":
            found, after = self._text_until(text, self.open_tag)
            events += found
            if after is None:
                return events
            self.state, self.buf = "head", after
        else:
            self.buf += text
        while True:
            if self.state not in ("tail", "whole"):
                step, needs_more = self._read_call()
                events += step
                if needs_more:
                    return events
                continue
            pos = self.buf.find(self.close_tag)
            if pos < 0:
                return events
            if self.state == "whole":
                events += self._whole_block(self.buf[:pos])
            after, self.buf, self.state = self.buf[pos + len(self.close_tag):], "", "text"
            found, rest = self._text_until(after, self.open_tag)
            events += found
            if rest is None:
                return events
            self.state, self.buf = "head", rest

    def finish(self) -> list[OutputEvent]:
        """See :meth:`ToolParser.finish`; a block whose call never started comes back as text."""
        if self.state == "text":
            return self._flush_text()
        if self.state in ("head", "whole"):
            return self._content(self.open_tag + self.buf)
        if self.state == "tail":
            return []
        return self._cut_call()
