"""CUDA implementation of ``revolta::quant_matmul`` through the native library (ctypes, C ABI).

fp16 activations and scales with K % 32 == 0, N % 8 == 0 and a group size that is a multiple of 32 run the
native kernels (a skinny split-K GEMM for up to 8 rows, a WMMA tensor-core GEMM above); anything else runs the
reference, slower but never an error. Launches go to torch's current stream (CUDA-graph capturable).
"""

from __future__ import annotations

import ctypes
from functools import cache

import torch

from revolta_kernels import native, ops_quant
from revolta_kernels.native import check
from revolta_kernels.reference import quant as ref_quant

_c_int, _ptr = ctypes.c_int, ctypes.c_void_p
_SIGNATURES: dict[str, list] = {
    "revolta_quant_gemm_splits": [_c_int, _c_int, _c_int, _c_int, _c_int, _c_int, ctypes.POINTER(_c_int)],
    "revolta_quant_gemm": [_ptr, _ptr, _ptr, _ptr, _ptr, _ptr, _c_int, _c_int, _c_int, _c_int, _c_int, _c_int,
                           _c_int, _ptr],
}


@cache
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def native_supports(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, qzeros: torch.Tensor, bits: int,
                    group_size: int) -> bool:
    """Whether the native kernels handle this call (otherwise the reference runs)."""
    k, n = x.shape[-1], qweight.shape[1]
    return (
        bits in (4, 8) and x.dtype == torch.float16 and scales.dtype == torch.float16 and x.is_cuda
        and qweight.dtype == torch.int32 and qzeros.dtype == torch.int32
        and k % 32 == 0 and n % 8 == 0 and group_size % 32 == 0 and k % group_size == 0
        and qweight.shape[0] * (32 // bits) == k and scales.shape == (k // group_size, n)
        and qzeros.shape == (k // group_size, n * bits // 32)
        and qweight.is_contiguous() and scales.is_contiguous() and qzeros.is_contiguous()
        and qweight.data_ptr() % 16 == 0 and scales.data_ptr() % 8 == 0
    )


def gemm_splits(m: int, n: int, k: int, bits: int, group_size: int, device: torch.device) -> int:
    """K splits the kernel uses for these sizes (1: none)."""
    assert native.LIB is not None
    out = ctypes.c_int()
    check(native.LIB.revolta_quant_gemm_splits(m, n, k, bits, group_size, _sm_count(device.index or 0),
                                               ctypes.byref(out)))
    return out.value


def quant_matmul(x, qweight, scales, qzeros, bits, group_size, zero_offset):
    if not native_supports(x, qweight, scales, qzeros, bits, group_size):
        return ref_quant.quant_matmul(x, qweight, scales, qzeros, bits, group_size, zero_offset)
    assert native.LIB is not None
    k, n = x.shape[-1], qweight.shape[1]
    x2 = x.reshape(-1, k)
    if not x2.is_contiguous() or x2.data_ptr() % 16:
        x2 = x2.contiguous().clone()
    m = x2.shape[0]
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if m:
        splits = gemm_splits(m, n, k, bits, group_size, x.device)
        partial = torch.empty(splits * m * n if splits > 1 else 0, dtype=torch.float32, device=x.device)
        stream = torch.cuda.current_stream(x.device).cuda_stream
        check(native.LIB.revolta_quant_gemm(
            out.data_ptr(), x2.data_ptr(), qweight.data_ptr(), scales.data_ptr(), qzeros.data_ptr(),
            partial.data_ptr() if splits > 1 else None, m, n, k, bits, group_size, zero_offset, splits, stream))
    return out.view(*x.shape[:-1], n)


def register() -> bool:
    """Register the CUDA implementation; False if the loaded library predates the quantized kernels."""
    lib = native.LIB
    if lib is None or not all(hasattr(lib, name) for name in _SIGNATURES):
        return False
    for name, argtypes in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.argtypes = argtypes
        fn.restype = _c_int
    ops_quant.quant_matmul.register_kernel("cuda")(quant_matmul)
    return True
