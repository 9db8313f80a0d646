"""What the GEMV benchmarks share besides common.timing: per-call and per-replay graph timing, the copy bandwidth they
are measured against, and random AWQ g128 weights with their byte counts."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from common.timing import capture, time_ms
from revolta_kernels import tuning as kernel_tuning

# (K, N) of the AWQ g128 decode GEMVs: Llama-3.1-8B's MLP pair and o projection, Qwen2.5-32B's MLP pair
AWQ_SHAPES = [(4096, 14336), (14336, 4096), (4096, 4096), (5120, 27648), (27648, 5120)]
# Llama-3.1-8B's linears as (N, K, name), the fp16 sections' shapes
DENSE_SHAPES = [(6144, 4096, "qkv"), (4096, 4096, "o"), (28672, 4096, "gate_up"), (4096, 14336, "down")]


def graph_us(seq: list[Callable[[], object]], st: dict | None = None) -> float:
    """Microseconds per call of the callables ``seq`` captured in order in one CUDA graph."""
    g = capture(seq, st)
    us = time_ms(g.replay) * 1e3 / len(seq)
    del g
    return us


def l2_bytes() -> int:
    return torch.cuda.get_device_properties(0).L2_cache_size


def copies(nbytes: int) -> int:
    """Weight copies to rotate through so that every call streams from DRAM (> 3x the L2)."""
    return max(2, math.ceil(3 * l2_bytes() / nbytes))


def awq_weights(k: int, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random AWQ g128 (qweight, scales, qzeros) of a K x N layer, zero point 8 everywhere."""
    qweight = torch.randint(-(2**31), 2**31 - 1, (k // 8, n), dtype=torch.int32, device="cuda")
    qzeros = torch.full((k // 128, n // 8), -2004318072, dtype=torch.int32, device="cuda")  # 0x88888888
    scales = (torch.rand(k // 128, n, device="cuda") * 2e-3 + 1e-3).half()
    return qweight, scales, qzeros


def awq_bytes(k: int, n: int, m: int = 1) -> int:
    """Bytes an M-row AWQ g128 call moves: packed weights + scales + zeros + activations in and out."""
    return k * n // 2 + (k // 128) * n * 2 + (k // 128) * n // 2 + m * (k + n) * 2


def both_pdl(build) -> dict:
    """``build()`` -> list of callables; per-call us with PDL off and on (captured separately)."""
    out = {}
    for on in (False, True):
        kernel_tuning.set_pdl(on)
        out["pdl" if on else "nopdl"] = graph_us(build())
    kernel_tuning.set_pdl(True)
    return out
