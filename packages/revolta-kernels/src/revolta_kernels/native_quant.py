"""CUDA implementation of ``revolta::quant_matmul`` through the native library (ctypes, C ABI).

fp16 activations and scales with K % 32 == 0, N % 8 == 0 and a group size that is a multiple of 32 run the
native kernels (a skinny split-K GEMM for up to 8 rows, a WMMA tensor-core GEMM above); anything else runs the
reference, slower but never an error. Launches go to torch's current stream (CUDA-graph capturable).

The skinny kernel's split-K needs a small workspace (one arrival counter per 128 output columns, zero between
launches, plus fp32 partial sums). It is one zero-initialised buffer per device, created and grown outside
CUDA-graph capture (the engine's eager warm-up does that) and never freed, since captured graphs keep its
address. Calls on one device are assumed to be ordered (one stream at a time), as the engine runs them.
"""

from __future__ import annotations

import ctypes
import logging
from functools import cache

import torch

from revolta_kernels import native, ops, ops_quant
from revolta_kernels.native import check
from revolta_kernels.reference import quant as ref_quant

logger = logging.getLogger(__name__)

_c_int, _c_ll, _ptr = ctypes.c_int, ctypes.c_longlong, ctypes.c_void_p
_SIGNATURES: dict[str, list] = {
    "revolta_quant_gemm_workspace": [_c_int, _c_int, _c_int, _c_int, _c_int, _c_int, ctypes.POINTER(_c_ll)],
    "revolta_quant_gemm_act": [_ptr, _ptr, _ptr, _ptr, _ptr, _ptr, _c_ll, _c_int, _c_int, _c_int, _c_int, _c_int,
                               _c_int, _c_int, _c_int, _ptr, _ptr],
    "revolta_quant_gemm_norm": [_ptr, _ptr, _ptr, _ptr, _ptr, ctypes.c_float, _c_int, _ptr, _ptr, _ptr, _ptr, _c_ll,
                                _c_int, _c_int, _c_int, _c_int, _c_int, _c_int, _c_int, _ptr, _c_int, _ptr],
}
SKINNY_MAX_M = ops_quant.SKINNY_MAX_M
ACT_ORDER_CODE = 0x100  # OR-ed into revolta_quant_gemm_act's act: the act-order kernel's code without an order
ACT_INT8X = 0x200  # OR-ed into revolta_quant_gemm_act's act: int8 activations (csrc/quant_gemv_dp4a.cuh)
_MIN_WORKSPACE = 4 << 20
_workspaces: dict[int, torch.Tensor] = {}
_outgrown: list[torch.Tensor] = []  # kept alive: CUDA graphs captured earlier still point at them
_epoch = 0  # launch plans (and so workspace sizes) change with the benchmark overrides of revolta_kernels.tuning


@cache
def sm_count(index: int) -> int:
    """Streaming multiprocessors of CUDA device ``index`` (the split-K plan fills them)."""
    return torch.cuda.get_device_properties(index).multi_processor_count


def device_index(device: torch.device) -> int:
    """The CUDA device index of ``device`` (the current device when it has none)."""
    return device.index if device.index is not None else torch.cuda.current_device()


def plans_changed() -> None:
    """Forget the cached workspace sizes: the launch overrides changed (:mod:`revolta_kernels.tuning`)."""
    global _epoch
    _epoch += 1


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
        and qweight.data_ptr() % 16 == 0 and scales.data_ptr() % 16 == 0
    )


@cache
def _workspace_bytes(m: int, n: int, k: int, bits: int, group_size: int, index: int, epoch: int) -> int:
    assert native.LIB is not None
    out = ctypes.c_longlong()
    with torch.cuda.device(index):
        check(native.LIB.revolta_quant_gemm_workspace(m, n, k, bits, group_size, sm_count(index),
                                                      ctypes.byref(out)))
    return out.value


def workspace(device: torch.device, nbytes: int) -> torch.Tensor:
    """The device's zero-initialised split-K workspace, at least ``nbytes`` long."""
    index = device_index(device)
    ws = _workspaces.get(index)
    if ws is not None and ws.numel() >= nbytes:
        return ws
    if torch.cuda.is_current_stream_capturing():
        # A persistent buffer cannot be made (zeroed) during capture; a capture-local one is zeroed by a
        # memset node on every replay, which is correct, only one node more.
        logger.warning("quantized GEMM workspace grown during CUDA-graph capture (%d bytes); run the shape "
                       "eagerly first to avoid a per-replay memset", nbytes)
        return torch.zeros(nbytes, dtype=torch.uint8, device=device)
    size = max(nbytes, _MIN_WORKSPACE, 2 * ws.numel() if ws is not None else 0)
    if ws is not None:
        _outgrown.append(ws)
    _workspaces[index] = torch.zeros(size, dtype=torch.uint8, device=torch.device("cuda", index))
    return _workspaces[index]


def rows_2d(x: torch.Tensor, width: int) -> torch.Tensor:
    """``x`` as contiguous 16-byte aligned ``[rows, width]``."""
    x2 = x.reshape(-1, width)
    if not x2.is_contiguous() or x2.data_ptr() % 16:
        x2 = x2.contiguous().clone()
    return x2


def skinny_order(x_order: torch.Tensor | None, k: int, device: torch.device) -> torch.Tensor | None:
    """``x_order`` as the skinny kernels read it: int32 ``[K]`` on ``device``, contiguous, 16-byte aligned (a copy
    only where it is not already so: the engine keeps its orders that way). Raises ValueError on a wrong size."""
    if x_order is None:
        return None
    ops_quant.check_order(x_order, k)
    order = x_order.to(device=device, dtype=torch.int32).contiguous()
    return order if order.data_ptr() % 16 == 0 else order.clone()


def _quant_launch(x2, qweight, scales, qzeros, bits, group_size, zero_offset, k: int, act: int,
                  order: torch.Tensor | None = None) -> torch.Tensor:
    assert native.LIB is not None
    n, m = qweight.shape[1], x2.shape[0]
    out = torch.empty((m, n), dtype=x2.dtype, device=x2.device)
    if m:
        index = device_index(x2.device)
        need = _workspace_bytes(m, n, k, bits, group_size, index, _epoch)
        ws = workspace(x2.device, need) if need else None
        stream = torch.cuda.current_stream(x2.device).cuda_stream
        check(native.LIB.revolta_quant_gemm_act(
            out.data_ptr(), x2.data_ptr(), qweight.data_ptr(), scales.data_ptr(), qzeros.data_ptr(),
            ws.data_ptr() if ws is not None else None, ws.numel() if ws is not None else 0,
            m, n, k, bits, group_size, zero_offset, sm_count(index), act,
            order.data_ptr() if order is not None else None, stream))
    return out


def quant_matmul(x, qweight, scales, qzeros, bits, group_size, zero_offset, x_order=None, int8_activations=False):
    if not native_supports(x, qweight, scales, qzeros, bits, group_size):
        a = ref_quant.activations(ops_quant.in_order(x, x_order), bits, int8_activations)
        return ref_quant.quant_matmul(a, qweight, scales, qzeros, bits, group_size, zero_offset)
    k, n = x.shape[-1], qweight.shape[1]
    if x_order is not None and x.numel() // k > SKINNY_MAX_M:  # the tensor-core GEMM: gather first
        x, x_order = ops_quant.in_order(x, x_order), None
    order = skinny_order(x_order, k, x.device)
    act = ACT_INT8X if int8_activations else 0
    out = _quant_launch(rows_2d(x, k), qweight, scales, qzeros, bits, group_size, zero_offset, k, act, order)
    return out.view(*x.shape[:-1], n)


def quant_matmul_silu(x, qweight, scales, qzeros, bits, group_size, zero_offset, x_order=None, order_code=False,
                      int8_activations=False):
    k2 = x.shape[-1]
    k, n = k2 // 2, qweight.shape[1]
    rows = x.numel() // k2 if k2 else 0
    if k2 % 2 or rows > SKINNY_MAX_M or not native_supports(x[..., :k], qweight, scales, qzeros, bits, group_size):
        # Larger M (the tensor-core GEMM) or an unsupported call: the two ops one after the other.
        return ops_quant.quant_matmul(ops.silu_and_mul(x), qweight, scales, qzeros, bits, group_size, zero_offset,
                                      x_order, int8_activations)
    order = skinny_order(x_order, k, x.device)
    act = 1 | (ACT_ORDER_CODE if order_code else 0) | (ACT_INT8X if int8_activations else 0)
    out = _quant_launch(rows_2d(x, k2), qweight, scales, qzeros, bits, group_size, zero_offset, k, act, order)
    return out.view(*x.shape[:-1], n)


def norm_supports(x: torch.Tensor, residual: torch.Tensor | None, norm_weight: torch.Tensor, qweight: torch.Tensor,
                  scales: torch.Tensor, qzeros: torch.Tensor, bits: int, group_size: int) -> bool:
    """Whether the skinny kernel fuses the add + RMSNorm of this call (fp16, 1..8 rows; otherwise the norm
    kernel then :func:`quant_matmul` run)."""
    k = x.shape[-1]
    return (
        native_supports(x, qweight, scales, qzeros, bits, group_size)
        and 0 < x.numel() // k <= SKINNY_MAX_M
        and norm_weight.dtype == torch.float16 and norm_weight.is_cuda and norm_weight.shape == (k,)
        and (residual is None or (residual.shape == x.shape and residual.dtype == torch.float16
                                  and residual.device == x.device))
    )


def quant_matmul_add_rms_norm(x, residual, norm_weight, eps, zero_centered, qweight, scales, qzeros, bits,
                              group_size, zero_offset, x_order=None, int8_activations=False):
    if not norm_supports(x, residual, norm_weight, qweight, scales, qzeros, bits, group_size):
        if residual is None:
            normed, h = ops.rms_norm(x, norm_weight, eps, zero_centered), x.clone()
        else:
            normed, h = ops.fused_add_rms_norm(x, residual, norm_weight, eps, zero_centered)
        return ops_quant.quant_matmul(normed, qweight, scales, qzeros, bits, group_size, zero_offset, x_order,
                                      int8_activations), h
    assert native.LIB is not None
    k, n = x.shape[-1], qweight.shape[1]
    x2 = rows_2d(x, k)
    r2 = rows_2d(residual, k) if residual is not None else None
    w1 = rows_2d(norm_weight, k)
    m = x2.shape[0]
    order = skinny_order(x_order, k, x.device)
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    h = torch.empty((m, k), dtype=x.dtype, device=x.device)
    index = device_index(x.device)
    need = _workspace_bytes(m, n, k, bits, group_size, index, _epoch)
    ws = workspace(x.device, need) if need else None
    stream = torch.cuda.current_stream(x.device).cuda_stream
    check(native.LIB.revolta_quant_gemm_norm(
        out.data_ptr(), h.data_ptr(), x2.data_ptr(), r2.data_ptr() if r2 is not None else None, w1.data_ptr(),
        float(eps), int(bool(zero_centered)), qweight.data_ptr(), scales.data_ptr(), qzeros.data_ptr(),
        ws.data_ptr() if ws is not None else None, ws.numel() if ws is not None else 0,
        m, n, k, bits, group_size, zero_offset, sm_count(index), order.data_ptr() if order is not None else None,
        int(bool(int8_activations)), stream))
    return out.view(*x.shape[:-1], n), h.view(x.shape)


def register() -> bool:
    """Register the CUDA implementation; False if the loaded library predates these quantized kernels."""
    if not native.bind(_SIGNATURES):
        return False
    ops_quant.quant_matmul.register_kernel("cuda")(quant_matmul)
    ops_quant.quant_matmul_silu.register_kernel("cuda")(quant_matmul_silu)
    ops_quant.quant_matmul_add_rms_norm.register_kernel("cuda")(quant_matmul_add_rms_norm)
    return True
