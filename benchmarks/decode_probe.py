"""Inside one batch-1 decode step: when each probed kernel's blocks start, pass their PDL wait and finish.

Needs a native library built with ``-DREVOLTA_GEMV_PROBE`` (quant_gemv_probe.cuh): thread 0 of every block of
the skinny quantized GEMVs and of the light decode attention records %globaltimer and clock64 at six points
(start, before the PDL wait, after it, inputs staged, main loop done, exit). The captured decode step is replayed
once, the records are grouped into launches (a launch's blocks all exit before any block of the next launch
of the same kernel does: PDL lets a kernel start early but not pass its wait early), and each launch is
described against the previous probed launch's last exit ("prev_end"; the attention's previous probed launch
is the qkv GEMV, so the rotary kernel between them is inside its figures):

- release_us: its first block's wait return after prev_end (the hand-off);
- post_wait_us: its last exit after its first wait return;
- path_us: its last exit after prev_end (what it adds to the step);
- phase medians over blocks (staged, main loop, exit), from clock64, in us.

Usage (GPU): REVOLTA_NATIVE_LIB=probe.so python benchmarks/decode_probe.py --out probe.json
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
from collections import defaultdict
from pathlib import Path

import torch
from decode_timeline import build_llm, captured_step
from gemv_probe import Rec, read_probe


def launches(recs: list[Rec]) -> list[list[Rec]]:
    """Consecutive records (by exit time) of one kernel shape form one launch (split-K blocks exit several us
    apart; two launches of one shape are a whole layer apart)."""
    out: list[list[Rec]] = []
    for r in sorted(recs, key=lambda r: r.t[5]):
        if out and (out[-1][0].n, out[-1][0].k) == (r.n, r.k) and r.t[5] - out[-1][-1].t[5] < 10000:
            out[-1].append(r)
        else:
            out.append([r])
    return out


def label(r: Rec) -> str:
    return f"attention d{-r.n} splits {r.k}" if r.n < 0 else f"gemv K={r.k} N={r.n}"


def describe(groups: list[list[Rec]]) -> dict:
    """Per kernel label: the mean over its launches of the hand-off, post-wait span, path and phase medians."""
    ratios = [(r.t[5] - r.t[0]) / (r.c[5] - r.c[0]) for g in groups for r in g if r.c[5] > r.c[0] and r.t[5] > r.t[0]]
    ns_per_cycle = statistics.median(ratios)
    per: dict = defaultdict(lambda: defaultdict(list))
    prev_end = None
    for g in sorted(groups, key=lambda g: max(r.t[5] for r in g)):
        end = max(r.t[5] for r in g)
        if prev_end is not None:
            d = per[label(g[0])]
            first_wait = min(r.t[2] for r in g)
            d["first_start_us"].append((min(r.t[0] for r in g) - prev_end) / 1e3)
            d["release_us"].append((first_wait - prev_end) / 1e3)
            d["post_wait_us"].append((end - first_wait) / 1e3)
            d["path_us"].append((end - prev_end) / 1e3)
            d["wait_spread_us"].append((statistics.median(r.t[2] for r in g) - first_wait) / 1e3)
            for name, a, b in (("staged", 2, 3), ("main_loop", 3, 4), ("exit", 4, 5)):
                v = sorted((r.c[b] - r.c[a]) * ns_per_cycle / 1e3 for r in g)
                d[f"{name}_med_us"].append(statistics.median(v))
                d[f"{name}_max_us"].append(v[-1])
            d["blocks"].append(len(g))
        prev_end = end
    return {k: {m: round(statistics.mean(v), 3) for m, v in d.items()} | {"launches": len(d["path_us"])}
            for k, d in per.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--config", default="benchmarks/configs/llama-3.1-8b-awq")
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--out", type=Path, default=Path("bench_out/decode_probe.json"))
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    llm, _ = build_llm(args.config, args.prompt_len)
    replay = captured_step(llm)
    for _ in range(3):
        replay()
    torch.cuda.synchronize()
    read_probe(), read_probe("revolta_attn_probe_read")  # drop the warm-up records
    replay()
    torch.cuda.synchronize()
    recs = read_probe() + read_probe("revolta_attn_probe_read")
    result = describe(launches(recs))
    for name, d in result.items():
        print(f"{name:28s} " + " ".join(f"{k}={v}" for k, v in d.items()))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
