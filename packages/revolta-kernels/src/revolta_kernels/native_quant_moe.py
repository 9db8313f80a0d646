"""CUDA implementation of ``revolta::quant_moe_matmul`` (quantized mixture-of-experts experts for few tokens)
through the native library (csrc/quant_moe.cuh; csrc/quant_moe_lean.cuh for one token).

fp16 activations and scales, int4 / int8 weights, K % 8 == 0, K <= 8192, N % 8 == 0, a group size that is a
multiple of the pack and divides K, at most ``QUANT_MOE_MAX_ROWS`` routed rows: the kernel; anything else runs the
reference, slower but never an error. Launches go to torch's current stream with no host sync (graph capturable).
"""

from __future__ import annotations

import ctypes

import torch

from revolta_kernels import native, ops_quant
from revolta_kernels.native import check
from revolta_kernels.native_hybrid import _lib, _stream
from revolta_kernels.reference import quant as ref_quant

_c_int, _ptr = ctypes.c_int, ctypes.c_void_p
QUANT_MOE_MAX_K = 8192  # kQuantMoeMaxK in csrc/quant_moe.cuh: the input row staged in shared memory
QUANT_MOE_MAX_ROWS = 65535  # kQuantMoeMaxRows in csrc/quant_moe.cuh: (token, slot) rows, the grid's y dimension


class QuantMoeParams(ctypes.Structure):
    """Mirror of ``revolta::QuantMoeParams`` (csrc/quant_moe.cuh)."""

    _fields_ = [(n, _ptr) for n in ("x", "qweight", "scales", "qzeros", "ids", "out")] + [
        (n, _c_int) for n in ("T", "top_k", "E", "N", "K", "group_size", "zero_offset", "act", "shared_id")]


_SIGNATURES: dict[str, list] = {"revolta_quant_moe_gemv": [ctypes.POINTER(QuantMoeParams), _c_int, _ptr],
                                "revolta_quant_moe_set_lean_tokens": [_c_int]}


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


def set_lean_tokens(tokens: int) -> int:
    """The most tokens the lean batch-1 kernel (csrc/quant_moe_lean.cuh) takes, for benchmarks' A/B (0: the original
    kernel always; negative: unchanged). Returns the previous value. CUDA graphs keep the kernel they were captured
    with."""
    return int(_lib().revolta_quant_moe_set_lean_tokens(tokens))


def register() -> bool:
    """Register the CUDA implementation; False if the loaded library predates the kernel."""
    if not native.bind(_SIGNATURES, (QuantMoeParams,)):
        return False
    ops_quant.quant_moe_matmul.register_kernel("cuda")(quant_moe_matmul)
    return True
