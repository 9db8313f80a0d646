"""Tool-call arguments as JSON: exact big integers, non-finite numbers kept as strings, partial text tolerated."""

from __future__ import annotations

import math
from typing import Any

from pydantic_core import from_json, to_json


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def parse_arguments(text: str, *, partial: bool = False) -> Any:
    """Parse JSON ``text`` (integers of any size stay exact; NaN/Infinity become strings).

    With ``partial`` a cut-off document yields what was complete (a call stopped by max_tokens).
    Raises ``ValueError`` for text that is not JSON.
    """
    return _finite(from_json(text or "{}", allow_partial="trailing-strings" if partial else False))


def arguments_object(text: str) -> dict[str, Any]:
    """The arguments as an object, best effort: partial JSON is completed, anything else becomes ``{}``."""
    try:
        value = parse_arguments(text, partial=True)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def dump_arguments(value: Any) -> str:
    """JSON text for arguments (ints exact, non-finite numbers as strings)."""
    return to_json(_finite(value)).decode()
