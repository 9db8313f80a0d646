"""Greedy argmax over LM-head-sized logits: torch's reduction against ``revolta::argmax``, in CUDA graphs.

Usage: ``python benchmarks/argmax_bench.py [--out bench_out/argmax_bench.json]``; prints and writes us per call (50 calls per graph).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from common.timing import graph_call_us

from revolta_kernels import ops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("bench_out/argmax_bench.json"))
    args = parser.parse_args()
    res: dict[str, float] = {}
    for rows, cols in ((1, 128256), (1, 248320), (64, 128256)):
        x = torch.randn(rows, cols, device="cuda")
        if ops.argmax(x).tolist() != x.argmax(dim=-1).tolist():
            raise SystemExit(f"revolta::argmax disagrees with torch.argmax at {rows}x{cols}")
        res[f"torch_{rows}x{cols}_us"] = round(graph_call_us(lambda x=x: x.argmax(dim=-1), calls=50, reps=10, inner=1), 2)
        res[f"revolta_{rows}x{cols}_us"] = round(graph_call_us(lambda x=x: ops.argmax(x), calls=50, reps=10, inner=1), 2)
    print(json.dumps(res))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
