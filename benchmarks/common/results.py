"""Merge benchmark JSON files into one (device runs bring back few files): ``merge_results.py OUT.json IN.json...``.

Each input lands under its file stem; one that does not parse (a benchmark that died mid-write) is recorded as
``{"error": ...}`` instead of failing the merge."""

from __future__ import annotations

import json
import pathlib
import sys


def main(out: str, inputs: list[str]) -> None:
    res = {}
    for p in inputs:
        try:
            res[pathlib.Path(p).stem] = json.loads(pathlib.Path(p).read_text())
        except Exception as e:  # any unreadable file is reported in the merged result, not raised
            res[pathlib.Path(p).stem] = {"error": str(e)}
    pathlib.Path(out).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
