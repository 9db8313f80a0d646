"""Launch tuning of the native quantized GEMM and skinny fp16 GEMV: the process-wide overrides (benchmark sweeps,
the engine's int8-activation switch), the launch plan a call would make, and programmatic dependent launch.

Re-exported by ``native_quant``; the launch plans (and split-K workspace sizes) depend on these settings, so
:func:`epoch` changes with every :func:`tune`.
"""

from __future__ import annotations

import ctypes
from functools import cache

import torch

from revolta_kernels import native
from revolta_kernels.native import check


@cache
def sm_count(index: int) -> int:
    """Streaming multiprocessors of CUDA device ``index`` (the split-K plan fills them)."""
    return torch.cuda.get_device_properties(index).multi_processor_count


def device_index(device: torch.device) -> int:
    """The CUDA device index of ``device`` (the current device when it has none)."""
    return device.index if device.index is not None else torch.cuda.current_device()


_epoch = 0  # bumped by tune(): launch plans (and workspace sizes) depend on the overrides


def epoch() -> int:
    """A counter that changes whenever :func:`tune` changes the launch parameters."""
    return _epoch


GEMV_DEFAULT_FLAGS = 2 | 4  # the built-in skinny schedule bits (one-pass staging, 16-column split-K-free blocks)
GEMV_FLAG_INT8X = 16  # skinny calls (M <= 8): int8 activations, dp4a dot products (csrc/quant_gemv_xq.cuh)


def tune(gemv_warps: int = 0, gemv_rows: int = 0, gemv_waves: int = 1, gemm_variant: int = -1,
         gemv_defer: int = -1, gemv_prefetch_kb: int = -1, gemv_share: int = 0, gemv_minb: int = 0,
         gemv_full: int = -1, gemv_flags: int = -1) -> None:
    """Override the launch parameters process-wide (benchmark sweeps); no arguments restores the defaults.

    Skinny kernel: warps per block (4 or 8), packed rows per step (4 or 8), waves of resident blocks the
    split-K plan fills, scale per weight (0) or deferred to the fp32 flush (1); tensor-core GEMM: tile
    variant 0-4 (see csrc/quant_gemm.cu); ``gemv_prefetch_kb``: weights the whole skinny grid prefetches to L2
    before its PDL wait (0 none, -1 the default: none; the dense fp16 GEMV takes the same setting);
    ``gemv_share``: 1 = the split-K plan fills every resident block slot, 2 = half of them (room for the next
    PDL-launched kernel), 0 = default; ``gemv_minb``: 4 = the co-resident skinny variant (compiled for 4 blocks
    per SM; exists for 8 warps x 4 rows per step at M <= 2, deferred scale), 0 = default; ``gemv_full``: the
    split-K-free skinny variant (csrc/quant_gemv_full.cuh: int4 g128, K % 1024 == 0, K <= 4096, N % 32 == 0,
    M <= 2): 1 = wherever it exists, 0 = never, -1 = the built-in rule; ``gemv_flags``: skinny schedule bits
    (1 = PDL trigger at kernel start instead of after the wait, 2 = one-pass x staging: act 2 loads x, residual
    and norm weight in one L2 round trip, the split-K-free kernel stages per warp, 4 = the split-K-free kernel
    with 16-column blocks, 3 per SM (plan() reports it as minb 3), 8 = the same only for calls without the fused
    norm, 16 = ``GEMV_FLAG_INT8X``: the skinny kernels (M <= 8, int4 and int8 weights, act-order included; the
    int4 split-K-free kernel with 16 columns, but not its act-order form) round each step's activations to int8
    and multiply with dp4a, not bit-equal to the fp16 path), -1 = the built-in choice (2 | 4).
    ``REVOLTA_QUANT_TUNE="warps,rows,waves,variant,defer[,prefetch_kb,share,minb,full,flags]"``
    in the environment applies the same at import (benchmarks pass a swept choice to a fresh process that way).
    The arguments are remembered: :func:`set_int8_activations` re-applies them with only bit 16 changed (an
    engine does that at startup from its ``activation_quant`` option, overriding bit 16 of this call).
    """
    global _epoch
    assert native.LIB is not None
    check(native.LIB.revolta_quant_tune(gemv_warps, gemv_rows, gemv_waves, gemm_variant, gemv_defer,
                                        gemv_prefetch_kb, gemv_share, gemv_minb, gemv_full, gemv_flags))
    _dense_tuning[0] = gemv_prefetch_kb
    check(native.LIB.revolta_dense_gemv_tune(*_dense_tuning))
    _epoch += 1
    _tuned.clear()
    _tuned.update(gemv_warps=gemv_warps, gemv_rows=gemv_rows, gemv_waves=gemv_waves, gemm_variant=gemm_variant,
                  gemv_defer=gemv_defer, gemv_prefetch_kb=gemv_prefetch_kb, gemv_share=gemv_share,
                  gemv_minb=gemv_minb, gemv_full=gemv_full, gemv_flags=gemv_flags)


_tuned: dict[str, int] = {}  # the last tune() call's arguments (empty: none yet, the defaults)


def set_int8_activations(on: bool) -> None:
    """Turn int8 activations (``GEMV_FLAG_INT8X``) on or off for later launches, keeping the rest of the last
    :func:`tune` call. Process-wide; affects the skinny decode kernels (M <= 8; see :func:`tune`'s bit 16),
    whose results are then not bit-equal to the fp16 path (about 0.5% relative error of a projection's output).
    CUDA graphs keep what they were captured with, so set it before capturing them."""
    assert native.LIB is not None
    old = _tuned.get("gemv_flags", -1)
    if on:
        flags = _flags_in_effect() | GEMV_FLAG_INT8X
    else:  # off over the built-in choice (which has no int8 bit) stays -1, deferring to it
        flags = -1 if old < 0 else old & ~GEMV_FLAG_INT8X
    tune(**{**_tuned, "gemv_flags": flags})


def int8_activations() -> bool:
    """Whether int8 activations (``GEMV_FLAG_INT8X``) are on for later launches (see
    :func:`set_int8_activations`); process-wide."""
    assert native.LIB is not None
    return bool(_flags_in_effect() & GEMV_FLAG_INT8X)


def _flags_in_effect() -> int:
    """The skinny schedule bits the last :func:`tune` call left in force (-1 there means the built-in ones)."""
    flags = _tuned.get("gemv_flags", -1)
    return GEMV_DEFAULT_FLAGS if flags < 0 else flags


_dense_tuning = [-1, 0, 0]  # prefetch KB, warps per block, rows per block (see revolta_dense_gemv_tune)


def dense_tune(warps: int = 0, rows: int = 0) -> None:
    """Block shape of the skinny fp16 GEMV (warps 4 or 8, weight rows per block 4 or 8; 0 = default 8 / 8).
    ``REVOLTA_DENSE_GEMV_TUNE="warps,rows"`` applies the same at import (benchmarks hand a swept choice to the
    engine that way)."""
    assert native.LIB is not None
    _dense_tuning[1:] = [warps, rows]
    check(native.LIB.revolta_dense_gemv_tune(*_dense_tuning))


def dense_plan(m: int) -> dict[str, int]:
    """The skinny fp16 GEMV's block shape for ``m`` rows."""
    assert native.LIB is not None
    info = (ctypes.c_int * 2)()
    check(native.LIB.revolta_dense_gemv_plan(m, info))
    return {"warps": info[0], "rows_per_block": info[1]}


def set_pdl(on: bool) -> bool:
    """Programmatic dependent launch for later launches of every native kernel (benchmarks' A/B; captured
    graphs keep what they were captured with). ``on`` restores the default (REVOLTA_PDL, sm_90+); returns
    whether PDL is now on for the current device."""
    assert native.LIB is not None
    return bool(native.LIB.revolta_set_pdl(1 if on else 0))


def plan(m: int, n: int, k: int, bits: int, group_size: int, device: torch.device) -> dict[str, int]:
    """The launch a call with these sizes makes (kernel, K splits, block shape), for benchmark reports."""
    assert native.LIB is not None
    info = (ctypes.c_int * 13)()
    index = device_index(device)
    with torch.cuda.device(index):
        check(native.LIB.revolta_quant_plan(m, n, k, bits, group_size, sm_count(index), info))
    if info[0] == 1:
        return {"kernel": "gemm", "variant": info[1]}
    keys = ("splits", "rows_per_split", "warps", "rows_per_step", "blocks_per_sm", "column_tiles", "defer",
            "prefetch_rows", "pdl", "minb", "full", "int8_x")
    return {"kernel": "skinny", **dict(zip(keys, info[1:], strict=True))}
