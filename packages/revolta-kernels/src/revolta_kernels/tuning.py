"""Launch overrides of the native GEMV/GEMM kernels, for benchmark sweeps only (not re-exported by the package).

Each function changes the launches of every later call in this process (CUDA graphs keep what they captured);
calling it with no arguments restores the built-in choice. Models never call these: every default is the best
measured choice, and a per-model setting such as int8 activations is an argument of the op.
"""

from __future__ import annotations

import ctypes

import torch

from revolta_kernels import native, native_quant
from revolta_kernels.native import check

_c_int = ctypes.c_int
_SIGNATURES: dict[str, list] = {
    "revolta_quant_tune": [_c_int] * 10,
    "revolta_quant_plan": [_c_int] * 7 + [ctypes.POINTER(_c_int)],
    "revolta_dense_gemv_tune": [_c_int, _c_int, _c_int],
    "revolta_dense_gemv_plan": [_c_int, _c_int, ctypes.POINTER(_c_int)],
    "revolta_set_pdl": [_c_int],
}


def _lib() -> ctypes.CDLL:
    assert native.LIB is not None, native.STATUS
    assert native.bind(_SIGNATURES), "the native library lacks the tuning entry points"
    return native.LIB


def quant_tune(gemv_warps: int = 0, gemv_rows: int = 0, gemv_waves: int = 1, gemm_variant: int = -1,
               gemv_defer: int = -1, gemv_prefetch_kb: int = -1, gemv_share: int = 0, gemv_minb: int = 0,
               gemv_full: int = -1, gemv_flags: int = -1) -> None:
    """Override the quantized GEMM's launch parameters (0 / -1 = the built-in choice).

    Skinny kernel (M <= 8): warps per block (4 or 8), packed rows per step (4 or 8), waves of resident blocks the
    split-K plan fills (0: whole balanced waves), scale per weight (0) or deferred to the fp32 flush (1), L2
    prefetch budget of the whole grid before its PDL wait in KB, ``gemv_share`` 2 = the split-K plan fills half
    the resident block slots, ``gemv_minb`` 4 = the co-resident variant (8 warps x 4 rows, M <= 2, deferred
    scale), ``gemv_full`` 1 / 0 = the split-K-free kernel wherever it exists / never, ``gemv_flags`` schedule
    bits (1 PDL trigger at kernel start, 2 one-pass staging, 4 16-column split-K-free blocks, 8 the same only
    without the fused norm). Tensor-core GEMM (M > 8): tile ``gemm_variant`` 0-4 (csrc/quant_gemm.cu).
    """
    check(_lib().revolta_quant_tune(gemv_warps, gemv_rows, gemv_waves, gemm_variant, gemv_defer, gemv_prefetch_kb,
                                    gemv_share, gemv_minb, gemv_full, gemv_flags))
    native_quant.plans_changed()


def quant_plan(m: int, n: int, k: int, bits: int, group_size: int, device: torch.device,
               int8_activations: bool = False) -> dict[str, int]:
    """The launch a quantized GEMM call with these sizes makes (kernel, K splits, block shape), for reports."""
    info = (ctypes.c_int * 13)()
    index = native_quant.device_index(device)
    with torch.cuda.device(index):
        check(_lib().revolta_quant_plan(m, n, k, bits, group_size, native_quant.sm_count(index),
                                        int(int8_activations), info))
    if info[0] == 1:
        return {"kernel": "gemm", "variant": info[1]}
    keys = ("splits", "rows_per_split", "warps", "rows_per_step", "blocks_per_sm", "column_tiles", "defer",
            "prefetch_rows", "pdl", "minb", "full", "int8_x")
    return {"kernel": "skinny", **dict(zip(keys, info[1:], strict=True))}


def dense_tune(warps: int = 0, rows: int = 0, *, norm: bool = False) -> None:
    """Block shape of the skinny fp16 GEMV (``norm``: of the one with the fused add + RMSNorm): warps per block 4
    or 8, weight rows per block 4 or 8 (always 4 above 4 rows); 0 = the defaults (8 x 4; with the norm 4 x 4)."""
    check(_lib().revolta_dense_gemv_tune(int(norm), warps, rows))


def dense_plan(m: int, *, norm: bool = False) -> dict[str, int]:
    """The skinny fp16 GEMV's block shape for ``m`` rows (``norm``: the fused add + RMSNorm GEMV's)."""
    info = (ctypes.c_int * 2)()
    check(_lib().revolta_dense_gemv_plan(int(norm), m, info))
    return {"warps": info[0], "rows_per_block": info[1]}


def set_pdl(on: bool) -> bool:
    """Programmatic dependent launch for later launches of every native kernel (A/B in one process); ``on``
    restores the default (on for sm_90+). Returns whether PDL is now on for the current device."""
    return bool(_lib().revolta_set_pdl(1 if on else 0))
