"""Qwen3-Coder's XML-like calls, with each value typed by the tool's JSON schema.

::

    <tool_call>
    <function=get_weather>
    <parameter=city>
    Paris
    </parameter>
    </function>
    </tool_call>

Values are written as plain text, so the schema decides their JSON type: integers stay exact at any size,
non-finite numbers stay strings, objects and arrays are parsed as JSON. The call starts when its function
name is read; the arguments object streams one parameter at a time.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from revolta_api.chat_output import OutputEvent
from revolta_api.tool_parsers.arguments import dump_arguments, parse_arguments
from revolta_api.tool_parsers.tagged import TaggedCallParser

_FUNCTION = re.compile(r"\s*<function=([^>\n]+)>")
_PARAMETER = re.compile(r"\s*<parameter=([^>\n]+)>(.*?)</parameter>", re.S)
_INT = re.compile(r"[-+]?\d+")


def _types(schema: dict[str, Any] | None) -> list[str]:
    if not schema:
        return []
    kind = schema.get("type")
    if isinstance(kind, list):
        return [str(k) for k in kind]
    if kind is None:
        for key in ("anyOf", "oneOf"):
            if key in schema:
                return [t for sub in schema[key] if isinstance(sub, dict) for t in _types(sub)]
        return []
    return [str(kind)]


def typed_value(text: str, schema: dict[str, Any] | None) -> Any:
    """The JSON value of a parameter written as ``text``, by its schema (text when it does not fit)."""
    value = text[1:] if text.startswith("\n") else text
    value = value[:-1] if value.endswith("\n") else value
    kinds = _types(schema)
    stripped = value.strip()
    options = (schema or {}).get("enum", [(schema or {})["const"]] if "const" in (schema or {}) else None)
    if isinstance(options, list) and stripped in options:
        return stripped  # a listed string, whatever whitespace surrounds it (constrained decoding allows some)
    if "null" in kinds and stripped.lower() in ("null", "none"):
        return None
    if "string" in kinds or (not kinds and stripped == ""):
        return value
    if "integer" in kinds and _INT.fullmatch(stripped):
        return int(stripped)
    if "number" in kinds or "integer" in kinds:
        if _INT.fullmatch(stripped):
            return int(stripped)
        try:
            number = float(stripped)
        except ValueError:
            return value
        return number if math.isfinite(number) else stripped
    if "boolean" in kinds and stripped.lower() in ("true", "false"):
        return stripped.lower() == "true"
    if not kinds or "object" in kinds or "array" in kinds:
        try:
            return parse_arguments(stripped)
        except ValueError:
            return value
    return value


class Qwen3CoderToolParser(TaggedCallParser):
    """``<tool_call><function=NAME><parameter=KEY>VALUE</parameter>...</function></tool_call>``."""

    open_tag = "<tool_call>"
    close_tag = "</tool_call>"

    def __init__(self, tokenizer: Any, tools: list[dict[str, Any]]) -> None:
        super().__init__(tokenizer, tools)
        self.name = ""
        self.params = 0

    def _read_call(self) -> tuple[list[OutputEvent], bool]:
        if self.state == "head":
            m = _FUNCTION.match(self.buf)
            if m is None:
                if len(self.buf.lstrip()) >= len("<function=") and not self.buf.lstrip().startswith("<function="):
                    self.state = "whole"  # not this format: read to the end tag and give it back as text
                    return [], False
                return [], True
            self.name, self.params = m.group(1).strip(), 0
            self.buf, self.state = self.buf[m.end():], "params"
            return [self._start(self.name)], False
        m = _PARAMETER.match(self.buf)
        if m is not None:
            events = self._args(self._param(m.group(1).strip(), m.group(2)))
            self.buf = self.buf[m.end():]
            return events, False
        end = re.match(r"\s*</function>", self.buf)
        if end is None and self.close_tag not in self.buf:
            return [], True
        events = self._args(self._close_args())
        self.buf = self.buf[end.end():] if end else self.buf
        self.state = "tail"
        return events, False

    def _whole_block(self, body: str) -> list[OutputEvent]:
        return self._content(self.open_tag + body + self.close_tag)

    def _cut_call(self) -> list[OutputEvent]:
        """A call cut inside a parameter keeps the parameters it completed."""
        return self._args(self._close_args())

    def _param(self, key: str, raw: str) -> str:
        schema = (self.schemas.get(self.name) or {}).get("properties", {}).get(key)
        value = typed_value(raw, schema if isinstance(schema, dict) else None)
        piece = ("{" if self.params == 0 else ", ") + json.dumps(key) + ": " + dump_arguments(value)
        self.params += 1
        return piece

    def _close_args(self) -> str:
        closing = "{}" if self.params == 0 else "}"
        self.params = -1
        return closing
