"""The fastest that a chain of dependent kernels can stream a given number of bytes on this GPU: the ceiling the
GEMV chains and the decode step are measured against, next to the copy bandwidth.

``csrc/chain_stream.cu`` (built here with nvcc) reads ``bytes`` per launch with every load it can keep in flight,
and takes one value from the previous launch after the PDL wait. No real kernel of that byte size in a dependent
chain can be faster, so ``fraction of copy`` for the probe is the most that the M=1 GEMV figures can ask of a kernel
of that size. For each size the best of several grids and load depths is kept.

The decode-step chain replays one Llama-3.1-8B AWQ g128 layer as the engine runs it (qkv with the norm, rotary
and cache write, attention over ``--context`` keys, o, gate_up with the norm, down with SiLU), 32 times, plus the
fp16 LM head, each link reading that kernel's bytes: its tokens per second is the ceiling of a decode step built
from that many kernels, as a fraction of gpu_e2e's roofline (copy bandwidth over all weight bytes).

The layout section reads an int4 qweight ([K / 8, N] int32) in the skinny GEMV's own order (512-byte column slices,
8 warps x U rows per step, its split-K grid) against the same bytes read contiguously by as many blocks: what the
layout alone costs the DRAM, before any arithmetic.

    python3 benchmarks/chain_ceiling.py --out bench_out/chain_ceiling.json
"""

from __future__ import annotations

import argparse
import ctypes
import json
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
from common.gemv import AWQ_SHAPES as SHAPES
from common.gemv import awq_bytes, copies
from common.timing import capture, copy_gbs, time_ms

SOURCE = Path(__file__).parent / "csrc" / "chain_stream.cu"
LINKS = 32  # the decode step's layer count: chains at least this deep


def build(lib: str | None) -> ctypes.CDLL:
    """The probe's shared library: ``lib`` if given, else compiled with nvcc for this GPU."""
    if lib is None:
        major, minor = torch.cuda.get_device_capability()
        lib = str(Path(tempfile.mkdtemp()) / "libchain_stream.so")
        subprocess.run(["nvcc", "-O3", f"-arch=sm_{major}{minor}", "-shared", "-Xcompiler", "-fPIC", "-o", lib,
                        str(SOURCE)], check=True)
    so = ctypes.CDLL(lib)
    so.chain_stream_launch.argtypes = [ctypes.c_void_p, ctypes.c_longlong, ctypes.c_void_p, ctypes.c_void_p,
                                       ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
    so.chain_strided_launch.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_void_p,
                                        ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
    return so


def checked(rc: int) -> None:
    if rc != 0:
        raise RuntimeError(f"chain probe launch failed with CUDA error {rc}")


def link_count(size: int) -> int:
    """Links (distinct buffers) of a ``size``-byte chain, so that each link streams from DRAM: at least LINKS, more
    copies than 3x the L2, at most 256 and 8 GB of them (small links stay in L2, as the rotary kernel's reads of
    what qkv just wrote do)."""
    return min(max(LINKS, copies(size)) if size else LINKS, 256, max(2, (8 << 30) // max(size, 1)))


# A link's launch: (buffer, previous value, this value, stream) pointers -> CUDA error code.
Launch = Callable[[int, int, int, int], int]


def stream_link(so: ctypes.CDLL, size: int, blocks: int, unroll: int, pdl: bool = True) -> Launch:
    """A contiguous ``size``-byte read by ``blocks`` blocks with ``unroll`` loads in flight per thread."""
    return lambda w, vin, vout, s: so.chain_stream_launch(w, size, vin, vout, blocks, unroll, int(pdl), s)


def strided_link(so: ctypes.CDLL, rows: int, row_bytes: int, splits: int, unroll: int) -> Launch:
    """A ``rows`` x ``row_bytes`` read in the skinny GEMV's order, ``splits`` blocks per column slice."""
    return lambda w, vin, vout, s: so.chain_strided_launch(w, rows, row_bytes, splits, vin, vout, unroll, 1, s)


class Chain:
    """A graph of dependent probe launches, link i reading its own buffer of ``sizes[i]`` random bytes."""

    def __init__(self, sizes: list[int], launches: list[Launch]) -> None:
        self.bufs = [torch.randint(-(2**31), 2**31 - 1, (max(s, 16) // 4,), dtype=torch.int32, device="cuda")
                     for s in sizes]
        self.vals = torch.zeros(len(sizes) + 1, 64, device="cuda")

        def link(i: int, launch: Launch) -> Callable[[], None]:
            return lambda: checked(launch(self.bufs[i].data_ptr(), self.vals[i].data_ptr(),
                                          self.vals[i + 1].data_ptr(), torch.cuda.current_stream().cuda_stream))

        self.graph = capture([link(i, f) for i, f in enumerate(launches)])
        self.links = len(launches)

    def us(self) -> float:
        """Microseconds per replay of the whole chain."""
        return time_ms(self.graph.replay) * 1e3


def link_us(size: int, launch: Launch) -> float:
    """Microseconds per link of a link_count(size)-deep chain of ``launch``."""
    n = link_count(size)
    chain = Chain([size] * n, [launch] * n)
    us = chain.us() / n
    del chain
    return us


def best_link(so: ctypes.CDLL, size: int, sms: int, pdl: bool = True) -> dict:
    """The fastest (blocks, unroll) for a chain of ``size``-byte links, and its microseconds per link."""
    best: dict = {}
    for mult in (1, 2, 4, 8):
        for unroll in (4, 8, 16):
            us = link_us(size, stream_link(so, size, mult * sms, unroll, pdl))
            if not best or us < best["us"]:
                best = {"us": us, "blocks": mult * sms, "unroll": unroll}
    return best


def layout_cost(so: ctypes.CDLL, k: int, n: int, sms: int) -> dict:
    """An int4 K x N qweight streamed in the skinny GEMV's order (512-byte column slices of rows N * 4 bytes
    apart, 8 warps x U rows per step, the GEMV's split-K grid) against the same bytes read contiguously by the same
    number of blocks: what the [K / 8, N] layout costs the DRAM before any arithmetic."""
    rows, row_bytes = k // 8, n * 4
    tiles = row_bytes // 512
    splits = max(1, (2 * sms) // tiles)
    size = rows * row_bytes
    out: dict = {"K": k, "N": n, "bytes": size, "blocks": tiles * splits}
    for unroll in (8, 16):
        out[f"strided_u{unroll}_us"] = link_us(size, strided_link(so, rows, row_bytes, splits, unroll))
        out[f"contiguous_u{unroll}_us"] = link_us(size, stream_link(so, size, tiles * splits, unroll))
    return out


def decode_layer(context: int) -> list[tuple[str, int]]:
    """One Llama-3.1-8B AWQ g128 decoder layer's kernels at batch 1 and the bytes each must read."""
    kv = 2 * context * 8 * 128 * 2
    return [("qkv", awq_bytes(4096, 6144)), ("rotary", 16 * 1024), ("attention", kv), ("o", awq_bytes(4096, 4096)),
            ("gate_up", awq_bytes(4096, 28672)), ("down", awq_bytes(14336, 4096))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", help="a prebuilt libchain_stream.so (default: build with nvcc)")
    ap.add_argument("--context", type=int, default=640, help="keys the decode attention reads (gpu_e2e: 512..767)")
    ap.add_argument("--weight-gb", type=float, default=5.727854592,
                    help="gpu_e2e's weight_GB of the AWQ config (its roofline's bytes)")
    ap.add_argument("--out", type=Path, default=Path("bench_out/chain_ceiling.json"))
    args = ap.parse_args()
    so = build(args.lib)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    bw = copy_gbs()
    res: dict = {"gpu": torch.cuda.get_device_name(), "copy_gbs": bw, "sms": sms}
    print(f"copy {bw:.0f} GB/s, {sms} SMs", flush=True)

    empty = best_link(so, 0, sms)
    res["empty_link_us"] = empty["us"]
    res["empty_link_nopdl_us"] = best_link(so, 0, sms, pdl=False)["us"]
    print(f"empty link: {empty['us']:.2f} us with PDL, {res['empty_link_nopdl_us']:.2f} us without", flush=True)

    res["shapes"] = []
    for k, n in SHAPES:
        size = awq_bytes(k, n) // 16 * 16
        b = best_link(so, size, sms)
        frac = size / b["us"] / 1e3 / bw
        res["shapes"].append({"K": k, "N": n, "bytes": size, **b, "frac_copy": frac})
        print(f"K={k:6d} N={n:6d}: {size / 1e6:6.1f} MB in {b['us']:6.2f} us per link = {100 * frac:.0f}% of copy "
              f"({b['blocks']} blocks, {b['unroll']} loads in flight)", flush=True)

    res["layout"] = []
    for k, n in SHAPES[:2] + [(4096, 28672)]:
        row = layout_cost(so, k, n, sms)
        res["layout"].append(row)
        print(f"qweight K={k:6d} N={n:6d} in the GEMV's order, {row['blocks']} blocks: "
              + ", ".join(f"U={u} strided {row[f'strided_u{u}_us']:.2f} us / contiguous "
                          f"{row[f'contiguous_u{u}_us']:.2f} us" for u in (8, 16)), flush=True)

    layer = decode_layer(args.context)
    per_kind = {name: best_link(so, size // 16 * 16, sms) for name, size in layer}
    head = best_link(so, 128256 * 4096 * 2, sms)
    res["decode_links"] = {name: {"bytes": size, **per_kind[name]} for name, size in layer}
    res["lm_head_link"] = head
    roofline = bw * 1e9 / (args.weight_gb * 1e9)
    for label, names in (("six_kernels", [n for n, _ in layer]),
                         ("five_kernels_rotary_fused", [n for n, _ in layer if n != "rotary"])):
        sizes = [size // 16 * 16 for name, size in layer if name in names] * 32 + [128256 * 4096 * 2]
        cfgs = [(per_kind[name]["blocks"], per_kind[name]["unroll"]) for name in names] * 32
        cfgs.append((head["blocks"], head["unroll"]))
        chain = Chain(sizes, [stream_link(so, size, b, u) for size, (b, u) in zip(sizes, cfgs, strict=True)])
        step_us = chain.us()
        del chain
        tok_s = 1e6 / step_us
        res[label] = {"step_us": step_us, "tok_s": tok_s, "fraction_of_roofline": tok_s / roofline}
        print(f"decode step as {label}: {step_us:.0f} us = {tok_s:.0f} tok/s = {100 * tok_s / roofline:.1f}% of the "
              f"roofline ({roofline:.0f} tok/s)", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
