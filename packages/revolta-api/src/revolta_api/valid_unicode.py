"""Request text must be valid Unicode. JSON can escape an unpaired UTF-16 surrogate (``"\\ud800"``) that Python
keeps in a ``str``, but no tokenizer, grammar compiler or IPC encoder takes it: such a request is a 400 naming
the field, checked once on the whole body before anything reads it."""

from __future__ import annotations

from typing import Any

from pydantic import model_validator
from pydantic_core import PydanticCustomError


def unpaired_surrogate_at(value: Any, path: str = "") -> str | None:
    """The dotted path of the first string (or key) in ``value`` that is not valid Unicode, or None."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return path or "body"
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            name = str(key).encode("utf-8", "backslashreplace").decode("utf-8")  # a bad key is shown escaped
            where = f"{path}.{name}" if path else name
            found = unpaired_surrogate_at(key, where) or unpaired_surrogate_at(item, where)
            if found:
                return found
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found = unpaired_surrogate_at(item, f"{path}.{i}" if path else str(i))
            if found:
                return found
    return None


def _check_body(cls: type, data: Any) -> Any:
    where = unpaired_surrogate_at(data)
    if where is not None:
        raise PydanticCustomError(
            "invalid_unicode", "{param} holds an unpaired UTF-16 surrogate (such as \\ud800), which is not valid "
            "Unicode", {"param": where})
    return data


def valid_unicode_body() -> Any:
    """A before-validator for a request body model: ``_valid_unicode = valid_unicode_body()`` in its class."""
    return model_validator(mode="before")(classmethod(_check_body))  # type: ignore[arg-type]
