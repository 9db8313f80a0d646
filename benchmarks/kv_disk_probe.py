"""Where a file-tier hit spends its time: raw reads, sha256, and the tier's own reads, serial and pooled.

Writes ``--blocks`` KV blocks of one model's block shape (default Llama-3.1-8B: 32 layers, 8 KV heads, 16 tokens,
head_dim 128, fp16 = 2 MiB a block) through :class:`revolta_offload.DiskTier`, then reports GB/s for each stage.
With ``--drop-caches`` (root) the page cache is dropped before the read passes, so they come from the disk.
Prints one JSON object; ``--out`` also writes it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from revolta_offload import DiskTier, HostBlock
from revolta_offload.connector import READ_THREADS


def drop_page_cache() -> bool:
    """Ask the kernel to drop clean page-cache pages; False where that is not allowed."""
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("1\n")
        return True
    except OSError:
        return False


def rate(nbytes: int, fn) -> float:
    """GB/s of ``fn()`` over ``nbytes``."""
    t0 = time.perf_counter()
    fn()
    return nbytes / (time.perf_counter() - t0) / 1e9


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=512)
    ap.add_argument("--shape", default="32,8,16,128", help="layers,kv_heads,block_size,head_dim")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--drop-caches", action="store_true")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    shape = tuple(int(x) for x in args.shape.split(","))
    tier = DiskTier(args.dir or tempfile.mkdtemp(prefix="revolta-kvprobe-"), "probe", 1 << 40)
    hashes = [hashlib.sha256(i.to_bytes(8, "little")).digest() for i in range(args.blocks)]
    block = HostBlock({"key": torch.randn(shape).half(), "value": torch.randn(shape).half()})
    for h in hashes:
        tier.put(h, block)
    paths = [tier.path_for(h) for h in hashes]
    nbytes = sum(p.stat().st_size for p in paths)
    threads = min(READ_THREADS, os.cpu_count() or 1)
    result: dict[str, object] = {"blocks": args.blocks, "bytes": nbytes, "threads": threads,
                                 "cpu_count": os.cpu_count()}
    payload = paths[0].read_bytes()
    result["sha256_one_core_GBps"] = rate(len(payload) * 64, lambda: [hashlib.sha256(payload) for _ in range(64)])

    def pass_(name: str, fn) -> None:
        dropped = drop_page_cache() if args.drop_caches else False
        result[name + "_GBps"] = rate(nbytes, fn)
        result[name + "_cold"] = dropped

    pass_("raw_read_serial", lambda: [p.read_bytes() for p in paths])
    with ThreadPoolExecutor(threads) as pool:
        pass_("raw_read_pooled", lambda: list(pool.map(Path.read_bytes, paths)))
        pass_("tier_get_serial", lambda: [tier.get(h) for h in hashes])
        pass_("tier_get_pooled", lambda: list(pool.map(tier.get, hashes)))
    text = json.dumps(result, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
