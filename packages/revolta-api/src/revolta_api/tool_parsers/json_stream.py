"""Stream one JSON value as it is generated: where it ends, and non-finite numbers rewritten as strings.

Models write ``NaN`` or ``Infinity`` now and then; those are not JSON, so a client parsing the arguments would
fail. The scanner holds each bare word (number, literal) until it ends and quotes the non-finite ones; all
other text passes through unchanged, so integers of any size stay exactly as generated.
"""

from __future__ import annotations

_NON_FINITE = {"NaN", "Infinity", "-Infinity", "+Infinity", "-NaN", "inf", "-inf", "nan"}
_DELIMITERS = set(",:]} \t\r\n")


class JsonValueStreamer:
    """Feeds text of one JSON value; returns the text to pass on and, once the value closes, what follows."""

    def __init__(self) -> None:
        self.depth = 0
        self.in_string = False
        self.escape = False
        self.done = False
        self.started = False
        self._word = ""

    def feed(self, text: str) -> tuple[str, str]:
        """(value text to emit now, text after the value's end — non-empty only once ``done``)."""
        out: list[str] = []
        for i, ch in enumerate(text):
            if self.done:
                return "".join(out), text[i:]
            if self.in_string:
                out.append(ch)
                if self.escape:
                    self.escape = False
                elif ch == "\\":
                    self.escape = True
                elif ch == '"':
                    self.in_string = False
                    self._close_scalar()
                continue
            if self._word and ch in _DELIMITERS:
                out.append(self._flush_word())
                if self.done:
                    return "".join(out), text[i:]
            if ch == '"':
                self.in_string = self.started = True
                out.append(ch)
            elif ch in "{[":
                self.depth += 1
                self.started = True
                out.append(ch)
            elif ch in "}]":
                self.depth -= 1
                out.append(ch)
                if self.depth <= 0:
                    self.done = True
            elif ch in _DELIMITERS:
                if self.started or not ch.isspace():
                    out.append(ch)
            else:
                self.started = True
                self._word += ch
        return "".join(out), ""

    def flush(self) -> str:
        """Text still held (a bare word at the end of the input)."""
        return self._flush_word() if self._word else ""

    def _flush_word(self) -> str:
        word, self._word = self._word, ""
        self._close_scalar()
        return f'"{word.lstrip("+")}"' if word in _NON_FINITE else word

    def _close_scalar(self) -> None:
        if self.depth == 0 and not self.in_string:
            self.done = True
