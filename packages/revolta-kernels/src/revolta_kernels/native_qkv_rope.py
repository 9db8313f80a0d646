"""CUDA implementation of ``revolta::quant_qkv_rope_cache``: the q/k/v projection (int4 group 128, residual add +
RMSNorm in front) whose epilogue rotates q and k and writes k and v into the fp16 paged cache
(csrc/quant_gemv_rope.cuh), where that kernel takes the call; else the native projection then the native
``rotary_and_cache``, one after the other.

Why: in a decode step the rotary kernel is one more link in the chain of dependent launches between the
projection and the attention, each link costing about a microsecond of hand-off (H200 decode timelines), for a
few kilobytes of work the projection's epilogue can do.
"""

from __future__ import annotations

import ctypes

import torch

from revolta_kernels import native, native_quant, ops_quant
from revolta_kernels.native import check

_c_int, _ptr = ctypes.c_int, ctypes.c_void_p


class GemvRope(ctypes.Structure):
    """Mirror of ``revolta::GemvRope`` in csrc/quant_common.cuh (field order and types must match)."""

    _fields_ = [
        ("q_out", _ptr),
        ("k_cache", _ptr),
        ("v_cache", _ptr),
        ("positions", _ptr),
        ("slots", _ptr),
        ("cos_sin", _ptr),
        ("num_heads", _c_int),
        ("num_kv_heads", _c_int),
        ("head_dim", _c_int),
        ("rot_dim", _c_int),
        ("neox", _c_int),
        ("block_size", _c_int),
    ]


_SIGNATURES: dict[str, list] = {
    "revolta_quant_gemm_norm_rope": [_ptr, _ptr, _ptr, _ptr, ctypes.c_float, _c_int, _ptr, _ptr, _ptr, _c_int, _c_int,
                                     _c_int, _c_int, _c_int, _c_int, _c_int, _ptr, ctypes.POINTER(GemvRope),
                                     _c_int, ctypes.POINTER(_c_int), _ptr],
}


def _fusable(x, residual, norm_weight, qweight, scales, qzeros, bits, group_size, positions, cos_sin_cache,
             num_heads, key_cache, value_cache, slot_mapping) -> bool:
    """The operands the fused kernel can take (the plan's own conditions are the library's to check)."""
    tokens = x.numel() // x.shape[-1] if x.shape[-1] else 0
    hkv, d = key_cache.shape[1], key_cache.shape[-1]
    return (
        bits == 4 and group_size == 128 and 0 < tokens <= ops_quant.QKV_ROPE_MAX_M
        and native_quant.norm_supports(x, residual, norm_weight, qweight, scales, qzeros, bits, group_size)
        and key_cache.dim() == 4 and key_cache.dtype == torch.float16 and value_cache.dtype == torch.float16
        and key_cache.shape == value_cache.shape and key_cache.is_contiguous() and value_cache.is_contiguous()
        and key_cache.device == x.device and value_cache.device == x.device
        and qweight.shape[1] == (num_heads + 2 * hkv) * d
        and cos_sin_cache.dtype == torch.float32 and cos_sin_cache.device == x.device and cos_sin_cache.dim() == 2
        and positions.device == x.device and slot_mapping.device == x.device
        and positions.numel() == tokens and slot_mapping.numel() == tokens
    )


def fused_launch(x, residual, norm_weight, eps, zero_centered, qweight, scales, qzeros, bits, group_size, zero_offset,
                 positions, cos_sin_cache, is_neox, num_heads, key_cache,
                 value_cache, slot_mapping, x_order=None,
                 int8_activations=False) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(q, h)`` from the one fused kernel, or None (nothing ran) where it does not take the call."""
    if not _fusable(x, residual, norm_weight, qweight, scales, qzeros, bits, group_size, positions, cos_sin_cache,
                    num_heads, key_cache, value_cache, slot_mapping):
        return None
    assert native.LIB is not None
    k = x.shape[-1]
    x2 = native_quant.rows_2d(x, k)
    r2 = native_quant.rows_2d(residual, k) if residual is not None else None
    m = x2.shape[0]
    order = native_quant.skinny_order(x_order, k, x.device)
    d = key_cache.shape[-1]
    q = torch.empty((m, num_heads, d), dtype=x.dtype, device=x.device)
    h = torch.empty((m, k), dtype=x.dtype, device=x.device)
    pos = positions.reshape(-1).to(torch.int64).contiguous()
    slots = slot_mapping.reshape(-1).to(torch.int64).contiguous()
    cs = cos_sin_cache.contiguous()
    rope = GemvRope(q.data_ptr(), key_cache.data_ptr(), value_cache.data_ptr(), pos.data_ptr(), slots.data_ptr(),
                    cs.data_ptr(), num_heads, key_cache.shape[1], d, cs.shape[-1], int(bool(is_neox)),
                    key_cache.shape[2])
    taken = _c_int(0)
    index = native_quant.device_index(x.device)
    check(native.LIB.revolta_quant_gemm_norm_rope(
        h.data_ptr(), x2.data_ptr(), r2.data_ptr() if r2 is not None else None, norm_weight.data_ptr(), float(eps),
        int(bool(zero_centered)), qweight.data_ptr(), scales.data_ptr(), qzeros.data_ptr(), m, qweight.shape[1], k,
        bits, group_size, zero_offset, native_quant.sm_count(index), order.data_ptr() if order is not None else None,
        ctypes.byref(rope), int(bool(int8_activations)), ctypes.byref(taken),
        torch.cuda.current_stream(x.device).cuda_stream))
    return (q, h.view(x.shape)) if taken.value else None


def quant_qkv_rope_cache(x, residual, norm_weight, eps, zero_centered, qweight, scales, qzeros, bits, group_size,
                         zero_offset, positions, cos_sin_cache, is_neox, num_heads, key_cache, value_cache,
                         slot_mapping, k_scales, v_scales, x_order=None, int8_activations=False):
    fused = fused_launch(x, residual, norm_weight, eps, zero_centered, qweight, scales, qzeros, bits, group_size,
                         zero_offset, positions, cos_sin_cache, is_neox, num_heads, key_cache, value_cache,
                         slot_mapping, x_order, int8_activations)
    if fused is not None:
        return fused
    return ops_quant.qkv_rope_two_steps(x, residual, norm_weight, eps, zero_centered, qweight, scales, qzeros, bits,
                                        group_size, zero_offset, positions, cos_sin_cache, is_neox, num_heads,
                                        key_cache, value_cache, slot_mapping, k_scales, v_scales, x_order,
                                        int8_activations)


def register() -> bool:
    """Register the CUDA implementation; False if the loaded library predates this kernel."""
    if not native.bind(_SIGNATURES, (GemvRope,)):
        return False
    ops_quant.quant_qkv_rope_cache.register_kernel("cuda")(quant_qkv_rope_cache)
    return True
