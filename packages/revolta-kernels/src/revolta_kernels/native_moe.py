"""CUDA implementations of the mixture-of-experts ops of :mod:`revolta_kernels.ops_moe` (``fused_moe``,
``moe_block``, ``moe_router``, ``moe_router_norm``, ``moe_topk_softmax``, ``moe_combine``) for few tokens, through the
native library (csrc/moe.cu).

Each implementation checks that the inputs are a case the kernels handle (csrc/moe.cuh) and otherwise runs the
reference, so an unsupported case is slower but never an error. Launches go to torch's current stream.
"""

from __future__ import annotations

import ctypes

import torch

from revolta_kernels import native, ops_moe
from revolta_kernels.native import check
from revolta_kernels.native_ops import _DTYPE, _stream
from revolta_kernels.reference import moe as ref_moe

_c_int, _c_float, _c_ll, _ptr = ctypes.c_int, ctypes.c_float, ctypes.c_longlong, ctypes.c_void_p

MOE_MAX_TOKENS = 256  # above this many tokens the sorted per-expert reference path reads fewer weight bytes
MOE_MAX_SMEM_FLOATS = 45 * 1024 // 4  # kMoeMaxSmemFloats in csrc/moe_common.cuh: H and K * I + Is


class MoeParams(ctypes.Structure):
    """Mirror of ``revolta::MoeParams`` (csrc/moe_common.cuh)."""

    _fields_ = [(n, _ptr) for n in ("x", "router_logits", "w13", "w2", "shared_w13", "shared_w2", "shared_gate",
                                    "topk_ids", "topk_weights", "act", "shared_scale", "out")] + [
        (n, _c_ll) for n in ("x_stride", "logits_stride")] + [
        (n, _c_int) for n in ("T", "H", "E", "I", "K", "Is", "renormalize")]


class MoeRouterNormParams(ctypes.Structure):
    """Mirror of ``revolta::MoeRouterNormParams`` (csrc/moe_router.cuh)."""

    _fields_ = [(n, _ptr) for n in ("x", "residual", "norm_w", "w", "logits", "h_out", "normed_out")] + [
        (n, _c_ll) for n in ("x_stride", "res_stride")] + [("eps", _c_float)] + [
        (n, _c_int) for n in ("tokens", "H", "E", "norm_threads", "zero_centered")]


class MoeCombineParams(ctypes.Structure):
    """Mirror of ``revolta::MoeCombineParams`` (csrc/moe_routing.cuh)."""

    _fields_ = [(n, _ptr) for n in ("y", "weights", "shared", "x", "gate", "out")] + [
        (n, _c_ll) for n in ("y_stride", "shared_stride", "x_stride")] + [
        (n, _c_int) for n in ("T", "K", "H")]


MOE_MAX_EXPERTS = 512  # kMoeMaxExperts in csrc/moe_common.cuh (two per thread of the routing block)
MOE_MAX_TOP_K = 16  # kMoeMaxTopK
MAX_GRID_Y = 65535  # CUDA grid y limit: moe_combine launches one block row per token

_SIGNATURES: dict[str, list] = {
    "revolta_moe_topk_softmax": [_ptr, _c_ll, _ptr, _ptr, _c_int, _c_int, _c_int, _c_int, _c_int, _ptr],
    "revolta_moe_combine": [ctypes.POINTER(MoeCombineParams), _c_int, _ptr],
    "revolta_moe": [ctypes.POINTER(MoeParams), _c_int, _ptr],
    "revolta_moe_router": [_ptr, _ptr, _c_ll, _ptr, _c_int, _c_int, _c_int, _c_int, _ptr],
    "revolta_moe_router_norm": [ctypes.POINTER(MoeRouterNormParams), _c_int, _ptr],
}


def _lib():
    assert native.LIB is not None
    return native.LIB


def _ptr_of(t: torch.Tensor | None) -> int | None:
    return None if t is None else t.data_ptr()


def _experts_ok(x, w13, w2) -> bool:
    if _DTYPE.get(x.dtype) is None or x.dim() != 2 or w13.dim() != 3 or w2.dim() != 3:
        return False
    e, two_i, h = w13.shape
    inter = two_i // 2
    return (
        w13.dtype == x.dtype and w2.dtype == x.dtype and x.shape[1] == h and tuple(w2.shape) == (e, h, inter)
        and h % 8 == 0 and inter % 8 == 0 and h <= MOE_MAX_SMEM_FLOATS and x.stride(-1) == 1 and 0 < x.shape[0] <= MOE_MAX_TOKENS
        and w13.is_contiguous() and w2.is_contiguous() and w13.data_ptr() % 16 == 0 and w2.data_ptr() % 16 == 0
    )


def _moe_launch(x, w13, w2, top_k: int, logits=None, renormalize=False, ids=None, weights=None, shared=None):
    if x.data_ptr() % 16 or x.stride(0) % 8:  # the kernel reads x rows with 16-byte loads
        x = x.clone(memory_format=torch.contiguous_format)
    t, h = x.shape
    e, two_i, _ = w13.shape
    inter = two_i // 2
    sw13, sw2, sgate = shared if shared is not None else (None, None, None)
    i_s = sw13.shape[0] // 2 if sw13 is not None else 0
    if ids is None:
        ids = torch.empty((t, top_k), dtype=torch.int64, device=x.device)
        weights = torch.empty((t, top_k), dtype=torch.float32, device=x.device)
    act = torch.empty((t, top_k * inter + i_s), dtype=torch.float32, device=x.device)
    scale = torch.empty((t,), dtype=torch.float32, device=x.device)
    out = torch.empty((t, h), dtype=x.dtype, device=x.device)
    p = MoeParams(x.data_ptr(), _ptr_of(logits), w13.data_ptr(), w2.data_ptr(), _ptr_of(sw13), _ptr_of(sw2),
                  _ptr_of(sgate), ids.data_ptr(), weights.data_ptr(), act.data_ptr(), scale.data_ptr(),
                  out.data_ptr(), x.stride(0), logits.stride(0) if logits is not None else 0, t, h, e, inter, top_k,
                  i_s, int(renormalize))
    check(_lib().revolta_moe(ctypes.byref(p), _DTYPE[x.dtype], _stream(x)))
    return out


def fused_moe(x, w13, w2, topk_weights, topk_ids):
    top_k = topk_ids.shape[-1] if topk_ids.dim() == 2 else 0
    if not (_experts_ok(x, w13, w2) and 1 <= top_k <= 16 and topk_ids.shape[0] == x.shape[0]
            and top_k * (w13.shape[1] // 2) <= MOE_MAX_SMEM_FLOATS):
        return ref_moe.fused_moe(x, w13, w2, topk_weights, topk_ids)
    ids = topk_ids.to(torch.int64).contiguous()
    weights = topk_weights.float().contiguous()
    return _moe_launch(x, w13, w2, top_k, ids=ids, weights=weights)


def moe_block(x, router_logits, w13, w2, top_k, renormalize, shared_w13, shared_w2, shared_gate):
    e = w13.shape[0] if w13.dim() == 3 else 0
    h = x.shape[-1]
    i_s = shared_w13.shape[0] // 2 if shared_w13 is not None else 0
    ok = (
        _experts_ok(x, w13, w2) and 1 <= top_k <= min(16, e) and e <= 512 and router_logits.dtype == x.dtype
        and tuple(router_logits.shape) == (x.shape[0], e) and router_logits.stride(-1) == 1
        and top_k * (w13.shape[1] // 2) + i_s <= MOE_MAX_SMEM_FLOATS
        and (shared_w13 is None) == (shared_w2 is None)
        and (shared_w13 is None or (
            shared_w13.dtype == x.dtype and shared_w2.dtype == x.dtype and shared_w13.is_contiguous()
            and shared_w2.is_contiguous() and tuple(shared_w13.shape) == (2 * i_s, h)
            and tuple(shared_w2.shape) == (h, i_s) and i_s % 8 == 0 and shared_w13.data_ptr() % 16 == 0
            and shared_w2.data_ptr() % 16 == 0))
        and (shared_gate is None or (shared_w13 is not None and shared_gate.dtype == x.dtype
                                     and shared_gate.numel() == h and shared_gate.is_contiguous()))
    )
    if not ok:
        return ref_moe.moe_block(x, router_logits, w13, w2, top_k, renormalize, shared_w13, shared_w2, shared_gate)
    shared = (shared_w13, shared_w2, shared_gate) if shared_w13 is not None else None
    return _moe_launch(x, w13, w2, top_k, logits=router_logits, renormalize=renormalize, shared=shared)


def moe_router(x, weight):
    ok = (
        _DTYPE.get(x.dtype) is not None and x.dim() == 2 and weight.dim() == 2 and weight.dtype == x.dtype
        and weight.shape[1] == x.shape[1] and x.shape[1] % 8 == 0 and x.stride(-1) == 1 and weight.is_contiguous()
        and weight.data_ptr() % 16 == 0 and x.device == weight.device and 0 < x.shape[0] <= MOE_MAX_TOKENS
    )
    if not ok:
        return ref_moe.moe_router(x, weight)
    if x.data_ptr() % 16 or x.stride(0) % 8:  # 16-byte loads of x rows
        x = x.clone(memory_format=torch.contiguous_format)
    t, h = x.shape
    e = weight.shape[0]
    out = torch.empty((t, e), dtype=x.dtype, device=x.device)
    check(_lib().revolta_moe_router(out.data_ptr(), x.data_ptr(), x.stride(0), weight.data_ptr(), t, h, e,
                                    _DTYPE[x.dtype], _stream(x)))
    return out


def _norm_threads(hidden: int) -> int:
    """Block size of the fused_add_rms_norm kernel for rows of ``hidden`` (threads_for(hidden / 4) in api.cu)."""
    t = 32
    while t < hidden // 4 and t < 1024:
        t *= 2
    return t


def _router_norm_ok(x, residual, weight, norm_weight) -> bool:
    h = x.shape[-1] if x.dim() == 2 else 0
    return (
        _DTYPE.get(x.dtype) is not None and x.dim() == 2 and residual.shape == x.shape and weight.dim() == 2
        and residual.dtype == x.dtype and weight.dtype == x.dtype and norm_weight.dtype == x.dtype
        and tuple(norm_weight.shape) == (h,) and weight.shape[1] == h and h % 8 == 0 and h <= MOE_MAX_SMEM_FLOATS
        and x.stride(-1) == 1 and residual.stride(-1) == 1 and weight.is_contiguous() and norm_weight.is_contiguous()
        and weight.data_ptr() % 16 == 0 and norm_weight.data_ptr() % 16 == 0 and x.device == weight.device
        and 0 < x.shape[0] <= MOE_MAX_TOKENS
    )


def moe_router_norm(x, residual, weight, norm_weight, eps, zero_centered):
    if not _router_norm_ok(x, residual, weight, norm_weight):
        return ref_moe.moe_router_norm(x, residual, weight, norm_weight, eps, zero_centered)
    if x.data_ptr() % 16 or x.stride(0) % 8:  # 16-byte loads of the rows
        x = x.clone(memory_format=torch.contiguous_format)
    if residual.data_ptr() % 16 or residual.stride(0) % 8:
        residual = residual.clone(memory_format=torch.contiguous_format)
    t, h = x.shape
    e = weight.shape[0]
    logits = torch.empty((t, e), dtype=x.dtype, device=x.device)
    h_out = torch.empty((t, h), dtype=x.dtype, device=x.device)
    normed = torch.empty((t, h), dtype=x.dtype, device=x.device)
    p = MoeRouterNormParams(x.data_ptr(), residual.data_ptr(), norm_weight.data_ptr(), weight.data_ptr(),
                            logits.data_ptr(), h_out.data_ptr(), normed.data_ptr(), x.stride(0), residual.stride(0),
                            float(eps), t, h, e, _norm_threads(h), int(bool(zero_centered)))
    check(_lib().revolta_moe_router_norm(ctypes.byref(p), _DTYPE[x.dtype], _stream(x)))
    return logits, normed, h_out


def _topk_ok(experts: int, top_k: int) -> bool:
    """Whether the routing kernels take ``top_k`` of ``experts`` (two experts per thread of a 256-thread block)."""
    return 0 < experts <= MOE_MAX_EXPERTS and 1 <= top_k <= min(MOE_MAX_TOP_K, experts)


def moe_topk_softmax(router_logits, top_k, renormalize):
    ok = (
        _DTYPE.get(router_logits.dtype) is not None and router_logits.dim() == 2 and router_logits.stride(-1) == 1
        and _topk_ok(router_logits.shape[1], top_k) and router_logits.stride(0) >= router_logits.shape[1]
    )
    if not ok:
        return ref_moe.moe_topk_softmax(router_logits, top_k, renormalize)
    t, e = router_logits.shape
    ids = torch.empty((t, top_k), dtype=torch.int64, device=router_logits.device)
    weights = torch.empty((t, top_k), dtype=torch.float32, device=router_logits.device)
    check(_lib().revolta_moe_topk_softmax(router_logits.data_ptr(), router_logits.stride(0), ids.data_ptr(),
                                          weights.data_ptr(), t, e, top_k, int(bool(renormalize)),
                                          _DTYPE[router_logits.dtype], _stream(router_logits)))
    return weights, ids


def _rows_ok(t: torch.Tensor) -> bool:
    """Rows of whole 16-byte chunks (the kernel's 8-element loads): contiguous within a token, 16-byte aligned
    starts (a token stride of a multiple of 8 elements)."""
    inner_ok = t.stride(-1) == 1 and (t.dim() < 3 or t.stride(1) == t.shape[2] or t.shape[1] == 1)
    return inner_ok and (t.dim() == 1 or t.stride(0) % 8 == 0) and t.data_ptr() % 16 == 0


def moe_combine(y, weights, shared, x, shared_gate):
    h = y.shape[-1] if y.dim() == 3 else 0
    ok = (
        _DTYPE.get(y.dtype) is not None and y.dim() == 3 and h % 8 == 0 and _rows_ok(y)
        and weights.dtype == torch.float32 and tuple(weights.shape) == tuple(y.shape[:2]) and weights.is_contiguous()
        and 1 <= y.shape[1] <= MOE_MAX_TOP_K and y.shape[0] <= MAX_GRID_Y  # one block row per token
        and (shared is None or (
            x is not None and shared_gate is not None and shared.dtype == y.dtype and x.dtype == y.dtype
            and shared_gate.dtype == y.dtype and shared.dim() == 2 and tuple(shared.shape) == (y.shape[0], h)
            and _rows_ok(shared) and x.dim() == 2 and tuple(x.shape) == (y.shape[0], h) and _rows_ok(x)
            and shared_gate.numel() == h and shared_gate.is_contiguous() and shared_gate.data_ptr() % 16 == 0))
    )
    if not ok:
        return ref_moe.moe_combine(y, weights, shared, x, shared_gate)
    t, k, _ = y.shape
    out = torch.empty((t, h), dtype=y.dtype, device=y.device)
    has_shared = shared is not None
    p = MoeCombineParams(y.data_ptr(), weights.data_ptr(), _ptr_of(shared), _ptr_of(x if has_shared else None),
                         _ptr_of(shared_gate if has_shared else None), out.data_ptr(), y.stride(0),
                         shared.stride(0) if has_shared else 0, x.stride(0) if has_shared else 0, t, k, h)
    check(_lib().revolta_moe_combine(ctypes.byref(p), _DTYPE[y.dtype], _stream(y)))
    return out


def register() -> bool:
    """Register the CUDA implementations; False if the loaded library predates the MoE kernels."""
    if not native.bind(_SIGNATURES, (MoeParams, MoeRouterNormParams, MoeCombineParams)):
        return False
    ops_moe.fused_moe.register_kernel("cuda")(fused_moe)
    ops_moe.moe_block.register_kernel("cuda")(moe_block)
    ops_moe.moe_router.register_kernel("cuda")(moe_router)
    ops_moe.moe_router_norm.register_kernel("cuda")(moe_router_norm)
    ops_moe.moe_topk_softmax.register_kernel("cuda")(moe_topk_softmax)
    ops_moe.moe_combine.register_kernel("cuda")(moe_combine)
    return True
