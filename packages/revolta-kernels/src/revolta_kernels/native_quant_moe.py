"""CUDA implementations of ``revolta::quant_moe_matmul`` (quantized mixture-of-experts experts for few tokens),
``revolta::quant_moe_down_combine`` and ``revolta::quant_moe_gemm`` through the native library (csrc/quant_moe.cu;
csrc/quant_moe.cuh; csrc/quant_moe_gemv_one_token.cuh for one token; csrc/quant_moe_combine.cuh: one token's down projections and weighted sum in
one kernel; csrc/quant_moe_gemm.cuh: every expert's rows of a prefill in one tensor-core kernel).

fp16 activations and scales, int4 / int8 weights, K % 8 == 0, K <= 8192, N % 8 == 0, a group size that is a
multiple of the pack and divides K, at most ``QUANT_MOE_MAX_ROWS`` routed rows: the kernel; anything else runs the
reference, slower but never an error. Launches go to torch's current stream with no host sync (graph capturable).
"""

from __future__ import annotations

import ctypes

import torch

from revolta_kernels import native, ops_moe, ops_quant
from revolta_kernels.native import check
from revolta_kernels.native_moe import MOE_MAX_TOP_K, _lib, _ptr_of
from revolta_kernels.native_ops import _stream
from revolta_kernels.reference import quant as ref_quant

_c_int, _ptr = ctypes.c_int, ctypes.c_void_p
QUANT_MOE_MAX_K = 8192  # kQuantMoeMaxK in csrc/quant_moe.cuh: the input row staged in shared memory
QUANT_MOE_MAX_ROWS = 65535  # kQuantMoeMaxRows in csrc/quant_moe.cuh: (token, slot) rows, the grid's y dimension


class QuantMoeParams(ctypes.Structure):
    """Mirror of ``revolta::QuantMoeParams`` (csrc/quant_moe.cuh)."""

    _fields_ = [(n, _ptr) for n in ("x", "qweight", "scales", "qzeros", "ids", "out")] + [
        (n, _c_int) for n in ("T", "top_k", "E", "N", "K", "group_size", "zero_offset", "act", "shared_id")]


class QuantMoeCombineParams(ctypes.Structure):
    """Mirror of ``revolta::QuantMoeCombineParams`` (csrc/quant_moe.cuh; its kernel: csrc/quant_moe_combine.cuh)."""

    _fields_ = [("m", QuantMoeParams), ("weights", _ptr), ("x", _ptr), ("gate", _ptr), ("out", _ptr)]


_SIGNATURES: dict[str, list] = {"revolta_quant_moe_gemv": [ctypes.POINTER(QuantMoeParams), _c_int, _ptr],
                                "revolta_quant_moe_down_combine": [ctypes.POINTER(QuantMoeCombineParams), _c_int,
                                                                   _ptr],
                                "revolta_quant_moe_gemm_rows": [_ptr] * 8 + [ctypes.c_longlong] + [_c_int] * 9 + [_ptr]}
COMBINE_MAX_SMEM = 44 * 1024  # kCombineMaxSmem in csrc/quant_moe_combine.cuh


def combine_row_bytes(k: int, group_size: int, bits: int) -> int:
    """Shared memory of one row of the fused kernel (quant_moe_combine_row_bytes in csrc/quant_moe_combine.cuh)."""
    return (k * 2 + (k // group_size) * (16 * 2 + 16 // (32 // bits) * 4) + 15) // 16 * 16


def native_supports(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, qzeros: torch.Tensor,
                    ids: torch.Tensor, bits: int, group_size: int, act: int, shared_id: int = -1) -> bool:
    """Whether the kernel takes this call (otherwise the reference runs)."""
    if bits not in (4, 8) or qweight.dim() != 3 or ids.dim() != 2 or act not in (0, 1):
        return False
    pack = 32 // bits
    e, rows, n = qweight.shape
    k = rows * pack
    t, top_k = ids.shape
    per_token = top_k + (1 if shared_id >= 0 else 0)
    x_shape = (t, k) if act == 0 else (t, per_token, 2 * k)
    return (
        x.is_cuda and x.dtype == torch.float16 and scales.dtype == torch.float16 and tuple(x.shape) == x_shape
        and qweight.dtype == torch.int32 and qzeros.dtype == torch.int32 and ids.dtype == torch.int64
        and 0 < k <= QUANT_MOE_MAX_K and k % 8 == 0 and n % 8 == 0 and group_size % pack == 0
        and group_size > 0 and k % group_size == 0
        and tuple(scales.shape) == (e, k // group_size, n) and tuple(qzeros.shape) == (e, k // group_size, n // pack)
        and t * per_token <= QUANT_MOE_MAX_ROWS and shared_id < e
        and x.is_contiguous() and qweight.is_contiguous() and scales.is_contiguous() and qzeros.is_contiguous()
        and ids.is_contiguous()
        and x.data_ptr() % 16 == 0 and qweight.data_ptr() % 16 == 0 and scales.data_ptr() % 8 == 0
    )


def quant_moe_matmul(x, qweight, scales, qzeros, ids, bits, group_size, zero_offset, act, shared_id=-1):
    if not native_supports(x, qweight, scales, qzeros, ids, bits, group_size, act, shared_id):
        return ref_quant.quant_moe_matmul(x, qweight, scales, qzeros, ids, bits, group_size, zero_offset, act,
                                          shared_id)
    t, top_k = ids.shape
    e, rows, n = qweight.shape
    out = torch.empty((t, top_k + (1 if shared_id >= 0 else 0), n), dtype=x.dtype, device=x.device)
    p = QuantMoeParams(x.data_ptr(), qweight.data_ptr(), scales.data_ptr(), qzeros.data_ptr(), ids.data_ptr(),
                       out.data_ptr(), t, top_k, e, n, rows * (32 // bits), group_size, zero_offset, act, shared_id)
    check(_lib().revolta_quant_moe_gemv(ctypes.byref(p), bits, _stream(x)))
    return out


def fused_combine_supports(h: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, qzeros: torch.Tensor,
                           ids: torch.Tensor, weights: torch.Tensor, bits: int, group_size: int, shared_id: int,
                           x: torch.Tensor | None, shared_gate: torch.Tensor | None) -> bool:
    """Whether one token's ``revolta::quant_moe_down_combine`` runs the fused kernel (else the two kernels: the
    experts' rows, then ``revolta::moe_combine``)."""
    if not native_supports(h, qweight, scales, qzeros, ids, bits, group_size, 1, shared_id):
        return False
    t, top_k = ids.shape
    k, n = qweight.shape[1] * (32 // bits), qweight.shape[2]
    per_token = top_k + (1 if shared_id >= 0 else 0)
    shared_ok = shared_id < 0 or (
        x is not None and shared_gate is not None and x.dtype == torch.float16 and tuple(x.shape) == (t, n)
        and x.is_contiguous() and x.data_ptr() % 16 == 0 and shared_gate.dtype == torch.float16
        and shared_gate.numel() == n and shared_gate.is_contiguous() and shared_gate.data_ptr() % 16 == 0)
    return (t == 1 and 1 <= top_k <= MOE_MAX_TOP_K and n % 8 == 0 and shared_ok
            and weights.dtype == torch.float32 and tuple(weights.shape) == (t, top_k) and weights.is_contiguous()
            and per_token * combine_row_bytes(k, group_size, bits) <= COMBINE_MAX_SMEM)


def quant_moe_down_combine(h, qweight, scales, qzeros, ids, weights, bits, group_size, zero_offset, shared_id=-1,
                           x=None, shared_gate=None):
    if not fused_combine_supports(h, qweight, scales, qzeros, ids, weights, bits, group_size, shared_id, x,
                                  shared_gate):
        rows = ops_quant.quant_moe_matmul(h, qweight, scales, qzeros, ids, bits, group_size, zero_offset, 1, shared_id)
        k = ids.shape[1]
        if shared_id < 0:
            return ops_moe.moe_combine(rows, weights, None, None, None)
        return ops_moe.moe_combine(rows[:, :k], weights, rows[:, k], x, shared_gate)
    t, top_k = ids.shape
    e, rows_k, n = qweight.shape
    out = torch.empty((t, n), dtype=h.dtype, device=h.device)
    m = QuantMoeParams(h.data_ptr(), qweight.data_ptr(), scales.data_ptr(), qzeros.data_ptr(), ids.data_ptr(), None,
                       t, top_k, e, n, rows_k * (32 // bits), group_size, zero_offset, 1, shared_id)
    has_shared = shared_id >= 0
    p = QuantMoeCombineParams(m, weights.data_ptr(), x.data_ptr() if has_shared and x is not None else None,
                              shared_gate.data_ptr() if has_shared and shared_gate is not None else None,
                              out.data_ptr())
    check(_lib().revolta_quant_moe_down_combine(ctypes.byref(p), bits, _stream(h)))
    return out


MOE_GEMM_BM = 64  # MoeGemmWide::BM in csrc/quant_moe_gemm.cuh: rows per tile (the short tile falls back to it)
MOE_GEMM_MAX_TILES = 65535  # the grid's y dimension: ceil(R / 64) + E row tiles at most


def gemm_supports(x: torch.Tensor, offsets: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor,
                  qzeros: torch.Tensor, bits: int, group_size: int, x_rows: torch.Tensor | None = None,
                  out_rows: torch.Tensor | None = None, silu: bool = False) -> bool:
    """Whether ``revolta::quant_moe_gemm`` runs the tensor-core kernel (the shapes of revolta_quant_gemm)."""
    if bits not in (4, 8) or qweight.dim() != 3 or x.dim() != 2 or offsets.dim() != 1:
        return False
    pack = 32 // bits
    e, rows, n = qweight.shape
    k = rows * pack
    r = x.shape[0] if x_rows is None else x_rows.numel()
    index_ok = all(t is None or (t.dtype == torch.int64 and t.device == x.device and t.dim() == 1
                                 and t.numel() == r and t.is_contiguous()) for t in (x_rows, out_rows))
    return (
        index_ok and x.is_cuda and x.dtype == torch.float16 and scales.dtype == torch.float16
        and x.shape[1] == k and 0 < r < 2**31
        and qweight.dtype == torch.int32 and qzeros.dtype == torch.int32 and offsets.dtype == torch.int64
        and offsets.device == x.device and offsets.shape[0] == e + 1 and e > 0
        and k % 32 == 0 and n % (16 if silu else 8) == 0 and group_size > 0 and group_size % 32 == 0 and k % group_size == 0
        and tuple(scales.shape) == (e, k // group_size, n) and tuple(qzeros.shape) == (e, k // group_size, n // pack)
        and -(-r // MOE_GEMM_BM) + e <= MOE_GEMM_MAX_TILES
        and x.is_contiguous() and qweight.is_contiguous() and scales.is_contiguous() and qzeros.is_contiguous()
        and offsets.is_contiguous() and x.data_ptr() % 16 == 0 and qweight.data_ptr() % 16 == 0
        and scales.data_ptr() % 16 == 0 and qzeros.data_ptr() % 16 == 0
    )


def quant_moe_gemm(x, offsets, qweight, scales, qzeros, bits, group_size, zero_offset, x_rows=None, x_row_div=1,
                   out_rows=None, silu=False):
    if x_row_div < 1 or not gemm_supports(x, offsets, qweight, scales, qzeros, bits, group_size, x_rows, out_rows,
                                          silu):
        return ref_quant.quant_moe_gemm(x, offsets, qweight, scales, qzeros, bits, group_size, zero_offset, x_rows,
                                        x_row_div, out_rows, silu)
    e, rows, n = qweight.shape
    r = x.shape[0] if x_rows is None else x_rows.numel()
    # the kernel writes every row: the experts' rows and, from its spare blocks, zeros for the rest
    out = torch.empty((r, n // 2 if silu else n), dtype=x.dtype, device=x.device)
    check(_lib().revolta_quant_moe_gemm_rows(
        out.data_ptr(), x.data_ptr(), qweight.data_ptr(), scales.data_ptr(), qzeros.data_ptr(), offsets.data_ptr(),
        _ptr_of(x_rows), _ptr_of(out_rows),
        x.shape[0], r, e, n, rows * (32 // bits), bits, group_size, zero_offset, x_row_div, int(silu), _stream(x)))
    return out


def register() -> bool:
    """Register the CUDA implementation; False if the loaded library predates the kernel."""
    if not native.bind(_SIGNATURES, (QuantMoeParams, QuantMoeCombineParams)):
        return False
    ops_quant.quant_moe_matmul.register_kernel("cuda")(quant_moe_matmul)
    ops_quant.quant_moe_down_combine.register_kernel("cuda")(quant_moe_down_combine)
    ops_quant.quant_moe_gemm.register_kernel("cuda")(quant_moe_gemm)
    return True
