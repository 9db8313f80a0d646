"""Turn a chat completion's generated text into ordered events: reasoning, content, and tool-call pieces.

Both chat APIs (OpenAI's ``/v1/chat/completions`` and Anthropic's ``/v1/messages``) feed every DELTA output
through one :class:`ChatOutputParser`; streaming sends each event as it comes, non-streaming folds the same
events, so the two answers agree by construction. Stop strings are matched here, on content only, when a
reasoning parser is active (the engine would otherwise stop inside the thinking).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol


@dataclass
class ToolCallDelta:
    """A piece of tool call ``index``: ``id`` and ``name`` come once, on its first piece; ``arguments`` is JSON
    text as generated (the concatenation of all pieces is the call's arguments)."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass
class OutputEvent:
    """One ordered piece of a chat answer."""

    kind: Literal["reasoning", "content", "tool_call"]
    text: str = ""
    tool: ToolCallDelta | None = None


class ReasoningSplitter(Protocol):
    """Splits generated text into reasoning and content (see :mod:`revolta_api.reasoning`)."""

    def feed(self, text: str, token_ids: list[int]) -> list[OutputEvent]: ...

    @property
    def in_reasoning(self) -> bool: ...


class ToolCallExtractor(Protocol):
    """Finds tool calls in content text (see :mod:`revolta_api.tool_parsers`)."""

    def feed(self, text: str) -> list[OutputEvent]: ...

    def finish(self) -> list[OutputEvent]: ...


@dataclass
class _StopMatcher:
    """Content-side stop strings: holds back text that could still become a stop string."""

    stops: list[str]
    held: str = ""
    matched: str | None = None

    def feed(self, text: str) -> str:
        if self.matched is not None:
            return ""
        buf = self.held + text
        hits = [(buf.find(s), s) for s in self.stops if s in buf]
        if hits:
            pos, stop = min(hits)
            self.matched, self.held = stop, ""
            return buf[:pos]
        keep = max((len(s) - 1 for s in self.stops), default=0)
        # Hold back the longest tail that is a prefix of some stop string.
        cut = len(buf)
        for n in range(min(keep, len(buf)), 0, -1):
            if any(s.startswith(buf[-n:]) for s in self.stops):
                cut = len(buf) - n
                break
        self.held = buf[cut:]
        return buf[:cut]

    def flush(self) -> str:
        out, self.held = self.held, ""
        return out


@dataclass
class ChatOutputParser:
    """Reasoning split, then content-side stop strings, then tool-call extraction, for one choice."""

    reasoning: ReasoningSplitter | None = None
    tools: ToolCallExtractor | None = None
    stop: list[str] = field(default_factory=list)
    _stopper: _StopMatcher | None = None

    def __post_init__(self) -> None:
        self._stopper = _StopMatcher(list(self.stop)) if self.stop else None

    @property
    def stopped_by(self) -> str | None:
        """The stop string that ended the content (matched here), or None."""
        return self._stopper.matched if self._stopper else None

    def feed(self, text: str, token_ids: list[int]) -> list[OutputEvent]:
        """Events for one engine delta (empty once a stop string has matched)."""
        if self.stopped_by is not None:
            return []
        pieces = self.reasoning.feed(text, token_ids) if self.reasoning else [OutputEvent("content", text)]
        events: list[OutputEvent] = []
        for piece in pieces:
            if piece.kind == "reasoning":
                if piece.text:
                    events.append(piece)
                continue
            events.extend(self._content(piece.text))
            if self.stopped_by is not None:
                events.extend(self._finish_tools())
                break
        return events

    def finish(self) -> list[OutputEvent]:
        """Events still held back when the request ends."""
        events: list[OutputEvent] = []
        if self._stopper is not None and self._stopper.matched is None:
            events.extend(self._tools_feed(self._stopper.flush()))
        if self.stopped_by is None:
            events.extend(self._finish_tools())
        return events

    def _content(self, text: str) -> list[OutputEvent]:
        if self._stopper is not None:
            text = self._stopper.feed(text)
        return self._tools_feed(text)

    def _tools_feed(self, text: str) -> list[OutputEvent]:
        if not text:
            return []
        return self.tools.feed(text) if self.tools else [OutputEvent("content", text)]

    def _finish_tools(self) -> list[OutputEvent]:
        return self.tools.finish() if self.tools else []


def merged_text(events: list[OutputEvent], kind: str) -> str:
    """All text of one kind, concatenated."""
    return "".join(e.text for e in events if e.kind == kind)


def fold_tool_calls(events: list[OutputEvent]) -> list[dict[str, Any]]:
    """The complete tool calls (``index``, ``id``, ``name``, ``arguments``) the events describe, in order."""
    calls: dict[int, dict[str, Any]] = {}
    for e in events:
        if e.kind != "tool_call" or e.tool is None:
            continue
        call = calls.setdefault(e.tool.index, {"index": e.tool.index, "id": None, "name": None, "arguments": ""})
        call["id"] = e.tool.id or call["id"]
        call["name"] = e.tool.name or call["name"]
        call["arguments"] += e.tool.arguments
    return [calls[i] for i in sorted(calls)]
