"""Name-to-class tables chosen by a command-line flag (tool-call and reasoning parsers)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

T = TypeVar("T")


def lookup(table: Mapping[str, T], name: str, what: str) -> T:
    """``table[name]``; a ValueError naming ``what`` and every choice when ``name`` is not registered."""
    try:
        return table[name]
    except KeyError:
        raise ValueError(f"unknown {what} {name!r}; choose one of {', '.join(sorted(table))}") from None
