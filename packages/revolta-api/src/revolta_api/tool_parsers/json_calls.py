"""Parsers for models that write each call as a JSON object ``{"name": ..., "arguments": {...}}``.

Hermes (and Qwen2.5/Qwen3) wrap each object in ``<tool_call> ... </tool_call>``; Llama 3.x writes bare
objects (after an optional ``<|python_tag|>``), several separated by ``;``. Once the name is read the call
starts and its arguments stream as they are generated; an object that does not begin ``{"name": ...,
"arguments": ...}`` is read whole when it ends, and returned as text if it is not a call.
"""

from __future__ import annotations

import json
import re
from typing import Any

from revolta_api.chat_output import OutputEvent
from revolta_api.tool_parsers.arguments import dump_arguments, parse_arguments
from revolta_api.tool_parsers.base import ToolParser
from revolta_api.tool_parsers.json_stream import JsonValueStreamer
from revolta_api.tool_parsers.tagged import TaggedCallParser

_HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"(?:arguments|parameters)"\s*:\s*')
_ARGS_KEY = re.compile(r'"(?:arguments|parameters)"\s*:')
_HEAD_LIMIT = 1024  # a head this long that still does not match is not one


def call_from_object(value: Any) -> tuple[str, str] | None:
    """(name, arguments JSON) when ``value`` is a call object, else None."""
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    args = value.get("arguments", value.get("parameters", {}))
    if isinstance(args, str):  # some models write the arguments as a JSON string
        try:
            args = parse_arguments(args)
        except ValueError:
            return None
    if not isinstance(args, dict):
        return None
    return value["name"], dump_arguments(args)


class _JsonCallParser(ToolParser):
    """The head / arguments / tail machine both formats share."""

    close_tag = ""  # text that ends one call ("" : the object's own end)

    def __init__(self, tokenizer: Any, tools: list[dict[str, Any]]) -> None:
        super().__init__(tokenizer, tools)
        self.state = "text"
        self.buf = ""
        self.streamer: JsonValueStreamer | None = None

    def _head(self) -> list[OutputEvent] | None:
        """Start a call once its head is complete; None while more text is needed."""
        m = _HEAD.match(self.buf)
        if m:
            try:
                name = json.loads(f'"{m.group(1)}"')
            except ValueError:
                name = m.group(1)
            self.buf = self.buf[m.end():]
            self.streamer = JsonValueStreamer()
            self.state = "args"
            return [self._start(name)]
        if _ARGS_KEY.search(self.buf) or len(self.buf) > _HEAD_LIMIT or (self.close_tag and self.close_tag in self.buf):
            self.state = "whole"
            return []
        return None

    def _read_json_call(self) -> tuple[list[OutputEvent], bool]:
        """One step in the ``head`` or ``args`` state: (events, whether more text is needed to go on)."""
        if self.state == "head":
            started = self._head()
            return ([], True) if started is None else (started, False)
        events = self._stream_args()
        return events, self.state == "args"

    def _stream_args(self) -> list[OutputEvent]:
        assert self.streamer is not None
        body, cut = self.buf, None
        if self.close_tag and self.close_tag in body:
            cut = body.index(self.close_tag)
            body = body[:cut]
        out, rest = self.streamer.feed(body)
        events = self._args(out)
        if self.streamer.done:
            self.buf = rest + (self.buf[cut:] if cut is not None else "")
            self.state = "tail"
        elif cut is not None:  # the call ended before its arguments did: keep what was generated
            events += self._args(self.streamer.flush())
            self.buf = self.buf[cut:]
            self.state = "tail"
        else:
            self.buf = ""
        return events

    def _whole_text(self, body: str) -> list[OutputEvent]:
        """A complete object that did not stream: a call if it reads as one, else text."""
        try:
            call = call_from_object(parse_arguments(body))
        except ValueError:
            call = None
        if call is None:
            return self._content(self._raw(body))
        return [self._start(call[0]), *self._args(call[1])]

    def _raw(self, body: str) -> str:
        raise NotImplementedError


class HermesToolParser(_JsonCallParser, TaggedCallParser):
    """``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (Hermes, Qwen2.5, Qwen3)."""

    open_tag = "<tool_call>"
    close_tag = "</tool_call>"

    def _raw(self, body: str) -> str:
        return f"{self.open_tag}{body}{self.close_tag}"

    def _read_call(self) -> tuple[list[OutputEvent], bool]:
        return self._read_json_call()

    def _whole_block(self, body: str) -> list[OutputEvent]:
        return self._whole_text(body)

    def _cut_call(self) -> list[OutputEvent]:
        assert self.streamer is not None
        return self._args(self.streamer.flush())


class Llama3JsonToolParser(_JsonCallParser):
    """Llama 3.x JSON calls: the output is ``[<|python_tag|>]{"name": ..., "parameters": {...}}[; {...}]``.

    Only an output that starts with a call is read for calls (as in Meta's format); other output is text.
    """

    python_tag = "<|python_tag|>"

    def __init__(self, tokenizer: Any, tools: list[dict[str, Any]]) -> None:
        super().__init__(tokenizer, tools)
        self.state = "decide"
        self.raw = ""  # everything generated, returned whole if the output is not calls after all

    def _raw(self, body: str) -> str:
        return self.raw

    def feed(self, text: str) -> list[OutputEvent]:
        """See :meth:`ToolParser.feed`."""
        self.raw += text
        if self.state == "text":
            return self._content(text)
        self.buf += text
        events: list[OutputEvent] = []
        while True:
            if self.state == "decide":
                lead = self.buf.lstrip()
                if not lead or (self.python_tag.startswith(lead) and lead != self.python_tag):
                    return events
                if lead.startswith(self.python_tag):
                    lead = lead[len(self.python_tag):].lstrip()
                    if not lead:
                        return events
                if not lead.startswith("{"):
                    self.state = "text"
                    buf, self.buf = self.buf, ""
                    return self._content(buf)
                self.buf, self.state = lead, "head"
            elif self.state in ("head", "args"):
                step, needs_more = self._read_json_call()
                events += step
                if needs_more:
                    return events
            elif self.state == "tail":
                stripped = self.buf.lstrip().lstrip("}").lstrip()
                if not stripped:
                    return events
                if stripped.startswith(";"):
                    self.buf, self.state = stripped[1:], "head"
                    continue
                self.buf, self.state = "", "text"
                return events + self._content(stripped)
            else:  # whole: read at the end
                return events

    def finish(self) -> list[OutputEvent]:
        """See :meth:`ToolParser.finish`."""
        if self.state == "args":
            assert self.streamer is not None
            return self._args(self.streamer.flush())
        if self.state == "whole":
            return self._whole_output()
        if self.state in ("decide", "head") and self.buf.strip():
            return self._content(self.raw) if not self.count else self._content(self.buf)
        return []

    def _whole_output(self) -> list[OutputEvent]:
        body = self.buf
        try:
            value = parse_arguments(body)
        except ValueError:
            value = None
        calls = [call_from_object(v) for v in (value if isinstance(value, list) else [value])]
        if self.count or not calls or any(c is None for c in calls):
            return self._content(body if self.count else self.raw)
        events: list[OutputEvent] = []
        for name, args in calls:  # type: ignore[misc]
            events += [self._start(name), *self._args(args)]
        return events
