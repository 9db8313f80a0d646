"""CUDA implementations of the ``revolta::`` ops, backed by the native library through ctypes (paged attention
is in :mod:`revolta_kernels.native_attention`, the quantized and hybrid-model ops in their own modules).

Each implementation checks that the inputs are a case the kernels handle (dtype, layout, head size) and
otherwise runs the pure-torch reference, so an unsupported case is slower but never an error. All launches
go to torch's current CUDA stream, so the ops can be captured in CUDA graphs.
"""

from __future__ import annotations

from functools import cache

import torch

from revolta_kernels import ops
from revolta_kernels import reference as ref
from revolta_kernels.native import LIB, check

_DTYPE = {torch.float16: 0, torch.bfloat16: 1, torch.float32: 2}
_CACHE_KIND = {torch.int8: 1, torch.float8_e4m3fn: 2, torch.float8_e5m2: 3}


def _stream(t: torch.Tensor) -> int:
    return torch.cuda.current_stream(t.device).cuda_stream


@cache
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


_counters: dict[int, torch.Tensor] = {}
_outgrown: list[torch.Tensor] = []  # kept alive: CUDA graphs captured earlier still point at them


def _split_counters(device: torch.device, n: int) -> torch.Tensor:
    """The device's zeroed split arrival counters (int32), at least ``n`` of them.

    The decode kernels leave them zero after every launch, so one buffer per device serves every call on
    its stream (calls on one device are assumed ordered, as the engine runs them). Grown outside CUDA-graph
    capture (the engine's eager warm-up and the first eager call do that) and never freed, since captured
    graphs keep its address; a capture that needs more gets a capture-local zeroed buffer (a memset node).
    """
    index = device.index if device.index is not None else torch.cuda.current_device()
    buf = _counters.get(index)
    if buf is not None and buf.numel() >= n:
        return buf
    if torch.cuda.is_current_stream_capturing():
        return torch.zeros(n, dtype=torch.int32, device=device)
    size = max(n, 1 << 16, 2 * buf.numel() if buf is not None else 0)
    if buf is not None:
        _outgrown.append(buf)
    _counters[index] = torch.zeros(size, dtype=torch.int32, device=torch.device("cuda", index))
    return _counters[index]


def rms_norm(x, weight, eps, zero_centered=False):
    code = _DTYPE.get(x.dtype)
    if code is None or weight.dtype != x.dtype or weight.shape != (x.shape[-1],) or x.numel() == 0:
        return ref.rms_norm(x, weight, eps, zero_centered)
    xc, w = x.contiguous(), weight.contiguous()
    out = torch.empty_like(xc)
    hidden = xc.shape[-1]
    check(
        LIB.revolta_rms_norm(
            out.data_ptr(),
            xc.data_ptr(),
            w.data_ptr(),
            xc.numel() // hidden,
            hidden,
            eps,
            int(zero_centered),
            code,
            _stream(x),
        )
    )
    return out


def fused_add_rms_norm(x, residual, weight, eps, zero_centered=False):
    code = _DTYPE.get(x.dtype)
    if (
        code is None
        or residual.dtype != x.dtype
        or weight.dtype != x.dtype
        or residual.shape != x.shape
        or weight.shape != (x.shape[-1],)
        or x.numel() == 0
    ):
        return ref.fused_add_rms_norm(x, residual, weight, eps, zero_centered)
    xc, rc, w = x.contiguous(), residual.contiguous(), weight.contiguous()
    out, res_out = torch.empty_like(xc), torch.empty_like(rc)
    hidden = xc.shape[-1]
    check(
        LIB.revolta_fused_add_rms_norm(
            out.data_ptr(),
            res_out.data_ptr(),
            xc.data_ptr(),
            rc.data_ptr(),
            w.data_ptr(),
            xc.numel() // hidden,
            hidden,
            eps,
            int(zero_centered),
            code,
            _stream(x),
        )
    )
    return out, res_out


def silu_and_mul(x):
    code = _DTYPE.get(x.dtype)
    if code is None or x.shape[-1] % 2 or x.numel() == 0:
        return ref.silu_and_mul(x)
    xc = x.contiguous()
    d = xc.shape[-1] // 2
    out = xc.new_empty((*xc.shape[:-1], d))
    check(LIB.revolta_silu_and_mul(out.data_ptr(), xc.data_ptr(), xc.numel() // (2 * d), d, code, _stream(x)))
    return out


def sigmoid_gate_mul(x, gate):
    code = _DTYPE.get(x.dtype)
    if (code is None or gate.dtype != x.dtype or gate.dim() != 3 or gate.stride(-1) != 1 or x.numel() == 0
            or x.shape[0] != gate.shape[0] or x.shape[-1] != gate.shape[1] * gate.shape[2]):
        return ref.sigmoid_gate_mul(x, gate)
    xc = x.contiguous()
    out = torch.empty_like(xc)
    rows, heads, d = gate.shape
    check(LIB.revolta_sigmoid_gate_mul(out.data_ptr(), xc.data_ptr(), gate.data_ptr(), rows, heads, d,
                                       gate.stride(0), gate.stride(1), code, _stream(x)))
    return out


def argmax(x):
    if x.dtype != torch.float32 or x.dim() < 1 or x.numel() == 0 or x.shape[-1] >= 2**31 - 1:
        return x.argmax(dim=-1)
    xc = x.contiguous()
    cols = xc.shape[-1]
    rows = xc.numel() // cols
    out = torch.empty(xc.shape[:-1], dtype=torch.int64, device=x.device)
    ws = _split_counters(x.device, 4 * rows)  # per row: a 64-bit key slot and an arrival counter
    check(LIB.revolta_argmax_rows(out.data_ptr(), xc.data_ptr(), rows, cols, ws.data_ptr(), _stream(x)))
    return out


def rotary_embedding(positions, query, key, cos_sin_cache, is_neox):
    code = _DTYPE.get(query.dtype)
    rot_dim = cos_sin_cache.shape[-1]
    ok = (
        code is not None
        and key.dtype == query.dtype
        and query.dim() == 3
        and key.dim() == 3
        and query.stride(-1) == 1
        and key.stride(-1) == 1
        and cos_sin_cache.dtype in (query.dtype, torch.float32)
        and cos_sin_cache.device == query.device
        and positions.device == query.device
        and rot_dim % 2 == 0
        and rot_dim <= query.shape[-1]
        and key.shape[-1] == query.shape[-1]
        and query.shape[0] > 0
    )
    if not ok:
        return ref.rotary_embedding(positions, query, key, cos_sin_cache, is_neox)
    pos = positions.to(torch.int64).contiguous()
    cs = cos_sin_cache.contiguous()
    q_out, k_out = (
        torch.empty(query.shape, dtype=query.dtype, device=query.device),
        torch.empty(key.shape, dtype=key.dtype, device=key.device),
    )
    t, h, d = query.shape
    check(
        LIB.revolta_rotary_embedding(
            q_out.data_ptr(),
            k_out.data_ptr(),
            query.data_ptr(),
            key.data_ptr(),
            pos.data_ptr(),
            cs.data_ptr(),
            int(cs.dtype == torch.float32),
            t,
            h,
            key.shape[1],
            d,
            rot_dim,
            query.stride(0),
            query.stride(1),
            key.stride(0),
            key.stride(1),
            int(is_neox),
            code,
            _stream(query),
        )
    )
    return q_out, k_out


def int8_scales_ok(k_scales: torch.Tensor | None, v_scales: torch.Tensor | None) -> bool:
    """Whether an int8 cache's per-(token, head) scales are what the native kernels read: contiguous float32."""
    return (k_scales is not None and v_scales is not None and k_scales.dtype == torch.float32
            and v_scales.dtype == torch.float32 and k_scales.is_contiguous() and v_scales.is_contiguous())


def _cache_kind(key, value, key_cache, value_cache, k_scales, v_scales) -> int | None:
    """The cache kind code the native cache writes take for these operands (0 = the key's own dtype, 1 = int8 with
    float32 scales, 2 / 3 = fp8), or None when they cannot: strided [T, Hkv, D] keys and values of one dtype, a
    contiguous paged cache of their head shape, contiguous float32 scales for int8."""
    kind = 0 if key_cache.dtype == key.dtype else _CACHE_KIND.get(key_cache.dtype)
    ok = (
        kind is not None
        and value.dtype == key.dtype
        and value_cache.dtype == key_cache.dtype
        and key.dim() == 3
        and key.stride(-1) == 1
        and value.stride(-1) == 1
        and key_cache.is_contiguous()
        and value_cache.is_contiguous()
        and key.shape == value.shape
        and key.shape[1:] == (key_cache.shape[1], key_cache.shape[3])
        and (kind != 1 or int8_scales_ok(k_scales, v_scales))
    )
    return kind if ok else None


def reshape_and_cache(key, value, key_cache, value_cache, slot_mapping, k_scales, v_scales):
    code = _DTYPE.get(key.dtype)
    kind = _cache_kind(key, value, key_cache, value_cache, k_scales, v_scales)
    int8 = kind == 1
    ok = code is not None and kind is not None
    if not ok or key.shape[0] == 0:
        ref.reshape_and_cache(key, value, key_cache, value_cache, slot_mapping, k_scales, v_scales)
        return
    slots = slot_mapping.to(torch.int64).contiguous()
    check(
        LIB.revolta_reshape_and_cache(
            key.data_ptr(),
            value.data_ptr(),
            key_cache.data_ptr(),
            value_cache.data_ptr(),
            k_scales.data_ptr() if int8 else None,
            v_scales.data_ptr() if int8 else None,
            slots.data_ptr(),
            key.shape[0],
            key.shape[1],
            key.shape[2],
            key_cache.shape[2],
            key.stride(0),
            key.stride(1),
            value.stride(0),
            value.stride(1),
            code,
            kind,
            _stream(key),
        )
    )


def rotary_and_cache(positions, query, key, value, cos_sin_cache, is_neox, key_cache, value_cache, slot_mapping,
                     k_scales, v_scales):
    return _rope_cache(positions, query, key, value, cos_sin_cache, is_neox, key_cache, value_cache, slot_mapping,
                       k_scales, v_scales, None, None, 0.0, False)


def qk_norm_rotary_and_cache(positions, query, key, value, q_norm_weight, k_norm_weight, eps, zero_centered,
                             cos_sin_cache, is_neox, key_cache, value_cache, slot_mapping, k_scales, v_scales):
    return _rope_cache(positions, query, key, value, cos_sin_cache, is_neox, key_cache, value_cache, slot_mapping,
                       k_scales, v_scales, q_norm_weight, k_norm_weight, eps, zero_centered)


def _rope_cache(positions, query, key, value, cos_sin_cache, is_neox, key_cache, value_cache, slot_mapping,
                k_scales, v_scales, q_norm_weight, k_norm_weight, eps, zero_centered):
    norms = q_norm_weight is not None
    code = _DTYPE.get(query.dtype)
    rot_dim = cos_sin_cache.shape[-1]
    kind = _cache_kind(key, value, key_cache, value_cache, k_scales, v_scales)
    int8 = kind == 1
    ok = (
        code is not None
        and kind is not None
        and key.dtype == query.dtype
        and query.dim() == 3
        and query.stride(-1) == 1
        and key.shape[-1] == query.shape[-1]
        and cos_sin_cache.dtype in (query.dtype, torch.float32)
        and cos_sin_cache.device == query.device
        and positions.device == query.device
        and rot_dim % 2 == 0
        and rot_dim <= query.shape[-1]
        and query.shape[0] > 0
        and (
            not norms
            or (
                query.shape[-1] <= 256
                and q_norm_weight.shape == (query.shape[-1],)
                and k_norm_weight.shape == (query.shape[-1],)
                and q_norm_weight.dtype == query.dtype
                and k_norm_weight.dtype == query.dtype
                and q_norm_weight.is_contiguous()
                and k_norm_weight.is_contiguous()
            )
        )
    )
    if not ok:  # the separate ops, each native where it can be
        if norms:
            query = rms_norm(query.contiguous(), q_norm_weight, eps, zero_centered)
            key = rms_norm(key.contiguous(), k_norm_weight, eps, zero_centered)
        q, k = rotary_embedding(positions, query, key, cos_sin_cache, is_neox)
        reshape_and_cache(k, value, key_cache, value_cache, slot_mapping, k_scales, v_scales)
        return q
    pos = positions.to(torch.int64).contiguous()
    slots = slot_mapping.to(torch.int64).contiguous()
    cs = cos_sin_cache.contiguous()
    q_out = torch.empty(query.shape, dtype=query.dtype, device=query.device)
    t, h, d = query.shape
    check(
        LIB.revolta_rotary_and_cache(
            q_out.data_ptr(),
            query.data_ptr(),
            key.data_ptr(),
            value.data_ptr(),
            pos.data_ptr(),
            cs.data_ptr(),
            int(cs.dtype == torch.float32),
            key_cache.data_ptr(),
            value_cache.data_ptr(),
            k_scales.data_ptr() if int8 else None,
            v_scales.data_ptr() if int8 else None,
            slots.data_ptr(),
            t,
            h,
            key.shape[1],
            d,
            rot_dim,
            key_cache.shape[2],
            query.stride(0),
            query.stride(1),
            key.stride(0),
            key.stride(1),
            value.stride(0),
            value.stride(1),
            int(is_neox),
            q_norm_weight.data_ptr() if norms else None,
            k_norm_weight.data_ptr() if norms else None,
            eps,
            int(zero_centered),
            code,
            kind,
            _stream(query),
        )
    )
    return q_out


def register() -> None:
    """Register the CUDA implementations of every op (called once when the library loaded)."""
    ops.rms_norm.register_kernel("cuda")(rms_norm)
    ops.fused_add_rms_norm.register_kernel("cuda")(fused_add_rms_norm)
    ops.silu_and_mul.register_kernel("cuda")(silu_and_mul)
    ops.argmax.register_kernel("cuda")(argmax)
    ops.sigmoid_gate_mul.register_kernel("cuda")(sigmoid_gate_mul)
    ops.rotary_embedding.register_kernel("cuda")(rotary_embedding)
    ops._reshape_and_cache.register_kernel("cuda")(reshape_and_cache)
    ops._rotary_and_cache.register_kernel("cuda")(rotary_and_cache)
    ops._qk_norm_rotary_and_cache.register_kernel("cuda")(qk_norm_rotary_and_cache)
    from revolta_kernels import native_rope_attention

    ops._rotary_cache_and_attention.register_kernel("cuda")(native_rope_attention.rotary_cache_and_attention)
