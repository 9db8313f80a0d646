"""Stop strings: the earliest match in the generated text ends the completion."""

from __future__ import annotations


def find_stop(text: str, new_len: int, stops: list[str]) -> tuple[int, str] | None:
    """Find the earliest stop string that overlaps the last ``new_len`` characters of ``text``.

    Returns ``(index, stop)`` of the match, or None. Matches entirely inside older text were already
    checked when that text arrived.
    """
    best: tuple[int, str] | None = None
    for stop in stops:
        start = max(len(text) - new_len - len(stop) + 1, 0)
        idx = text.find(stop, start)
        if idx != -1 and (best is None or idx < best[0]):
            best = (idx, stop)
    return best
