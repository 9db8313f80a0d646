"""CUDA implementation of ``revolta::dense_linear`` and ``revolta::dense_linear_add_rms_norm`` through the native
library: the skinny fp16 GEMV (csrc/dense_gemv.cuh) and the same GEMV with the residual add + RMSNorm in front
(csrc/dense_gemv_norm.cuh), for 1..8 rows (decode). Other calls run ``F.linear`` (cuBLAS) and the norm ops.
Launches go to torch's current stream with programmatic dependent launch; no workspace, CUDA-graph capturable.
"""

from __future__ import annotations

import ctypes

import torch

from revolta_kernels import native, ops, ops_quant
from revolta_kernels.native import check
from revolta_kernels.native_quant import rows_2d

_c_int, _ptr = ctypes.c_int, ctypes.c_void_p
_SIGNATURES: dict[str, list] = {
    "revolta_dense_gemv": [_ptr, _ptr, _ptr, _c_int, _c_int, _c_int, _c_int, _ptr],
    "revolta_dense_gemv_norm": [_ptr, _ptr, _ptr, _ptr, _ptr, _ptr, _c_int, _c_int, _c_int, ctypes.c_float, _c_int,
                                _ptr],
}


def dense_supports(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether the native skinny fp16 GEMV takes this call (at most 8 rows; otherwise F.linear runs)."""
    k = weight.shape[-1] if weight.dim() == 2 else -1
    return (
        x.is_cuda and x.dtype == torch.float16 and weight.dtype == torch.float16 and weight.dim() == 2
        and weight.is_contiguous() and weight.data_ptr() % 16 == 0 and k % 8 == 0 and k > 0
        and x.shape[-1] == k and 0 < x.numel() // k <= ops_quant.SKINNY_MAX_M
    )


def dense_linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``F.linear(x, weight)``: the skinny GEMV where :func:`dense_supports` says so, else F.linear."""
    if not dense_supports(x, weight):
        return torch.nn.functional.linear(x, weight)
    assert native.LIB is not None
    n, k = weight.shape
    x2 = rows_2d(x, k)
    out = torch.empty((x2.shape[0], n), dtype=x.dtype, device=x.device)
    stream = torch.cuda.current_stream(x.device).cuda_stream
    check(native.LIB.revolta_dense_gemv(out.data_ptr(), x2.data_ptr(), weight.data_ptr(), x2.shape[0], n, k,
                                        x2.shape[1], stream))
    return out.view(*x.shape[:-1], n)


def dense_norm_supports(x: torch.Tensor, residual: torch.Tensor | None, norm_weight: torch.Tensor,
                        weight: torch.Tensor) -> bool:
    """Whether the native fused add + RMSNorm + GEMV takes this call (fp16, at most 8 rows, K % 8 == 0)."""
    k = x.shape[-1]
    return (
        dense_supports(x, weight) and norm_weight.dtype == torch.float16 and norm_weight.shape == (k,)
        and norm_weight.is_cuda
        and (residual is None or (residual.dtype == torch.float16 and residual.shape == x.shape and residual.is_cuda))
    )


def dense_linear_add_rms_norm(x, residual, norm_weight, eps, zero_centered, weight):
    """``(F.linear(rms_norm(h), weight), h)``: the fused kernel where :func:`dense_norm_supports` says so, else the
    norm op then F.linear."""
    if not dense_norm_supports(x, residual, norm_weight, weight):
        if residual is None:
            normed, h = ops.rms_norm(x, norm_weight, eps, zero_centered), x.clone()
        else:
            normed, h = ops.fused_add_rms_norm(x, residual, norm_weight, eps, zero_centered)
        return torch.nn.functional.linear(normed, weight), h
    assert native.LIB is not None
    n, k = weight.shape
    x2 = rows_2d(x, k)
    r2 = rows_2d(residual, k) if residual is not None else None
    g = norm_weight if norm_weight.is_contiguous() and norm_weight.data_ptr() % 16 == 0 else norm_weight.clone()
    out = torch.empty((x2.shape[0], n), dtype=x.dtype, device=x.device)
    h = torch.empty((x2.shape[0], k), dtype=x.dtype, device=x.device)
    stream = torch.cuda.current_stream(x.device).cuda_stream
    check(native.LIB.revolta_dense_gemv_norm(out.data_ptr(), h.data_ptr(), x2.data_ptr(),
                                             r2.data_ptr() if r2 is not None else None, g.data_ptr(),
                                             weight.data_ptr(), x2.shape[0], n, k, float(eps), int(zero_centered),
                                             stream))
    return out.view(*x.shape[:-1], n), h.view(x.shape)


def register() -> bool:
    """Register the CUDA implementations; False if the loaded library predates these kernels."""
    if not native.bind(_SIGNATURES):
        return False
    ops_quant.dense_linear.register_kernel("cuda")(dense_linear)
    ops_quant.dense_linear_add_rms_norm.register_kernel("cuda")(dense_linear_add_rms_norm)
    return True
