"""What a request's output must match (vLLM's ``StructuredOutputsParams``): a JSON schema, any JSON object, a
regex, one of a list of strings, an EBNF grammar, or an xgrammar structural tag."""

from __future__ import annotations

import json as _json
from dataclasses import dataclass
from typing import Any

from revolta_engine.errors import StructuredOutputError

PARAM = "structured_outputs"
MAX_JSON_WHITESPACE = 32  # characters in one run of whitespace between JSON elements


@dataclass
class StructuredOutputsParams:
    """Exactly one of the fields is set.

    ``json``: a JSON schema (dict or JSON text). ``regex``: the whole output matches it. ``choice``: the output
    is one of these strings. ``grammar``: an EBNF (GBNF-style) grammar whose ``root`` rule is the output.
    ``json_object``: any JSON object. ``structural_tag``: an xgrammar structural tag (dict or JSON text), used
    by the API to force tool calls in the format the tool-call parser reads.

    JSON output may carry whitespace between its elements (a run of at most 32 characters, so a model cannot loop
    on newlines forever); ``disable_any_whitespace`` allows only the one-line ``{"a": 1, "b": [2]}`` layout.
    """

    json: dict[str, Any] | str | None = None
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
    json_object: bool | None = None
    structural_tag: dict[str, Any] | str | None = None
    disable_any_whitespace: bool = False

    def __post_init__(self) -> None:
        self.validate()

    def kind(self) -> str:
        """The name of the one field that is set."""
        return next(name for name in _FIELDS if _is_set(getattr(self, name)))

    def validate(self) -> None:
        """Raise :class:`StructuredOutputError` unless exactly one well-typed field is set."""
        chosen = [name for name in _FIELDS if _is_set(getattr(self, name))]
        if len(chosen) != 1:
            what = "none is" if not chosen else f"{', '.join(chosen)} are"
            raise StructuredOutputError(f"exactly one of {', '.join(_FIELDS)} must be set, but {what}", param=PARAM)
        kind = chosen[0]
        value = getattr(self, kind)
        if kind in ("json", "structural_tag") and not isinstance(value, dict | str):
            raise StructuredOutputError(f"{kind} must be a JSON schema object or its JSON text, "
                                        f"not {type(value).__name__}", param=f"{PARAM}.{kind}")
        if kind in ("regex", "grammar") and not isinstance(value, str):
            raise StructuredOutputError(f"{kind} must be a string, not {type(value).__name__}",
                                        param=f"{PARAM}.{kind}")
        if kind == "choice" and (not isinstance(value, list) or not value
                                 or not all(isinstance(c, str) for c in value)):
            raise StructuredOutputError("choice must be a non-empty list of strings", param=f"{PARAM}.choice")

    def cache_key(self) -> tuple[str, str, bool]:
        """A key under which the compiled grammar is cached (equal constraints share one compilation)."""
        kind = self.kind()
        value = getattr(self, kind)
        if isinstance(value, dict | list):
            value = _json.dumps(value, sort_keys=True, separators=(",", ":"))
        return kind, str(value), bool(self.disable_any_whitespace)


_FIELDS = ("json", "regex", "choice", "grammar", "json_object", "structural_tag")


def _is_set(value: Any) -> bool:
    return value is not None and value is not False
