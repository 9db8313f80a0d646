"""Entry point of the `revolta` command."""

from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    """Run the revolta command line."""
    raise SystemExit("revolta: the command line is not built yet")
