"""CUDA implementations of the Gated DeltaNet ops (:mod:`revolta_kernels.ops_gdn`) through the native library.

Gated delta rule (decode and prefill), the fused decode step (gating, delta rule and gated RMSNorm, optionally with
the conv), causal conv1d (decode update and varlen prefill), the gating of the gated delta rule and gated RMSNorm
(csrc/gdn.cu). Each implementation checks that the inputs are a case the kernels handle and otherwise runs the
reference, so an unsupported case is slower but never an error. Launches go to torch's current stream (CUDA-graph
capturable: no host synchronisation on the decode paths).
"""

from __future__ import annotations

import ctypes

import torch

from revolta_kernels import native, native_ops, ops_gdn
from revolta_kernels.native import check
from revolta_kernels.native_ops import _DTYPE, _stream
from revolta_kernels.reference import conv1d as ref_conv
from revolta_kernels.reference import gdn as ref_gdn

_c_int, _c_float, _c_ll, _ptr = ctypes.c_int, ctypes.c_float, ctypes.c_longlong, ctypes.c_void_p
# the conv folds into the fused decode step while batch * heads is below this (measured faster at batch 1; larger
# steps run the conv1d update kernel, then the fused step)
GDN_CONV_FUSED_MAX_BLOCKS = 512


class GdnDecodeParams(ctypes.Structure):
    """Mirror of ``revolta::GdnDecodeParams`` (csrc/gdn_decode.cuh)."""

    _fields_ = [(n, _ptr) for n in ("q", "k", "v", "g", "beta", "states", "state_indices", "out")] + [
        (n, _c_ll) for n in ("q_stride_b", "q_stride_h", "k_stride_b", "k_stride_h", "v_stride_b", "v_stride_h",
                             "g_stride_b", "beta_stride_b")] + [
        (n, _c_int) for n in ("batch", "num_k_heads", "num_v_heads", "dv", "use_l2norm")]


class GdnFusedParams(ctypes.Structure):
    """Mirror of ``revolta::GdnFusedParams`` (csrc/gdn_decode_fused.cuh)."""

    _fields_ = [(n, _ptr) for n in ("q", "k", "v", "a", "b", "a_log", "dt_bias", "z", "norm_weight", "states",
                                    "state_indices", "out")] + [
        (n, _c_ll) for n in ("q_stride_b", "q_stride_h", "k_stride_b", "k_stride_h", "v_stride_b", "v_stride_h",
                             "a_stride_b", "b_stride_b", "z_stride_b", "z_stride_h")] + [
        (n, _c_int) for n in ("batch", "num_k_heads", "num_v_heads", "use_l2norm")] + [("eps", _c_float)]


class GdnPrefillParams(ctypes.Structure):
    """Mirror of ``revolta::GdnPrefillParams`` (csrc/gdn_prefill.cuh)."""

    _fields_ = [(n, _ptr) for n in ("q", "k", "v", "g", "beta", "states", "state_indices", "query_start_loc",
                                    "snap_offsets", "snap_len", "snap_slot", "out")] + [
        (n, _c_ll) for n in ("q_stride_t", "q_stride_h", "k_stride_t", "k_stride_h", "v_stride_t", "v_stride_h",
                             "g_stride_t", "beta_stride_t")] + [
        (n, _c_int) for n in ("num_seqs", "num_k_heads", "num_v_heads", "dv", "use_l2norm")]


class GdnConvParams(ctypes.Structure):
    """Mirror of ``revolta::GdnConvParams`` (csrc/gdn_decode_fused.cuh)."""

    _fields_ = [(n, _ptr) for n in ("x", "weight", "conv_states")] + [("x_stride", _c_ll)] + [
        (n, _c_int) for n in ("conv_dim", "K", "key_dim")]


_SIGNATURES: dict[str, list] = {
    "revolta_gdn_decode": [ctypes.POINTER(GdnDecodeParams), _c_int, _c_int, _ptr],
    "revolta_gdn_fused_decode": [ctypes.POINTER(GdnFusedParams), ctypes.c_void_p, _ptr, _c_int, _c_int, _ptr],
    "revolta_gdn_prefill": [ctypes.POINTER(GdnPrefillParams), _c_int, _c_int, _ptr],
    "revolta_conv1d_update": [_ptr, _ptr, _c_ll, _ptr, _ptr, _ptr, _ptr, _c_int, _c_int, _c_int, _c_int, _c_int,
                              _ptr],
    "revolta_conv1d_prefill": [_ptr, _ptr, _ptr, _ptr, _ptr, _ptr, _ptr, _ptr, _ptr, _ptr, _c_int, _c_int, _c_int,
                               _c_int, _c_int, _c_int, _ptr],
    "revolta_gdn_gating": [_ptr, _ptr, _ptr, _ptr, _ptr, _ptr, _c_int, _c_int, _c_ll, _c_ll, _c_int, _ptr],
    "revolta_rms_norm_gated": [_ptr, _ptr, _ptr, _ptr, _c_int, _c_int, _c_int, _c_ll, _c_ll, _c_ll, _c_ll, _c_float,
                               _c_int, _ptr],
}


def _lib():
    assert native.LIB is not None
    return native.LIB


def _ptr_of(t: torch.Tensor | None) -> int | None:
    return None if t is None else t.data_ptr()


def _aligned(t: torch.Tensor, elems: int) -> bool:
    """Rows of ``elems`` consecutive elements start aligned to their byte size (vector loads)."""
    nbytes = elems * t.element_size()
    return t.data_ptr() % nbytes == 0 and all(s % elems == 0 for s in t.stride()[:-1])


def _sorted_snapshots(seq, length, slot, num_seqs: int):
    """Snapshots sorted by (sequence, length) and each sequence's range in them; all on the device."""
    if seq is None or seq.numel() == 0:
        return None, None, None
    key = seq.to(torch.int64) * (1 << 32) + length.to(torch.int64)
    order = torch.argsort(key)
    s_seq = seq.to(torch.int64)[order]
    bounds = torch.arange(num_seqs + 1, device=seq.device, dtype=torch.int64)
    offsets = torch.searchsorted(s_seq, bounds).to(torch.int32)
    return offsets, length.to(torch.int64)[order].contiguous(), slot.to(torch.int64)[order].contiguous()


def _decay_beta(g: torch.Tensor, beta: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """g as float32 and beta in the activations' dtype, each with unit stride in its last dimension."""
    gf = g.float()
    bt = beta.to(dtype)
    return (gf if gf.stride(-1) == 1 else gf.contiguous()), (bt if bt.stride(-1) == 1 else bt.contiguous())


# ------------------------------------------------------------------------------------ gated delta rule
def gated_delta_rule_decode(q, k, v, g, beta, states, state_indices, use_qk_l2norm):
    code = _DTYPE.get(v.dtype)
    dk = q.shape[-1]
    ok = (
        code is not None and q.dtype == v.dtype and k.dtype == v.dtype and q.dim() == 3 and k.shape == q.shape
        and v.dim() == 3 and dk in (64, 128) and v.shape[2] % 64 == 0 and v.shape[1] % q.shape[1] == 0
        and q.stride(-1) == 1 and k.stride(-1) == 1 and v.stride(-1) == 1 and states.dtype == torch.float32
        and states.is_contiguous() and states.data_ptr() % 16 == 0
        and tuple(states.shape[1:]) == (v.shape[1], dk, v.shape[2]) and g.shape == v.shape[:2]
        and beta.shape == v.shape[:2]
    )
    if not ok:
        return ref_gdn.gated_delta_rule_recurrent(q, k, v, g, beta, states, state_indices, use_qk_l2norm)
    batch, hv, dv = v.shape
    out = torch.empty((batch, hv, dv), dtype=v.dtype, device=v.device)
    if batch == 0:
        return out
    gf, bt = _decay_beta(g, beta, v.dtype)
    idx = state_indices.to(torch.int64).contiguous()
    p = GdnDecodeParams(q.data_ptr(), k.data_ptr(), v.data_ptr(), gf.data_ptr(), bt.data_ptr(), states.data_ptr(),
                        idx.data_ptr(), out.data_ptr(), q.stride(0), q.stride(1), k.stride(0), k.stride(1),
                        v.stride(0), v.stride(1), gf.stride(0), bt.stride(0), batch, q.shape[1], hv, dv,
                        int(use_qk_l2norm))
    check(_lib().revolta_gdn_decode(ctypes.byref(p), dk, code, _stream(v)))
    return out


def _fused_step_args_ok(a, b, a_log, dt_bias, z, norm_weight, states, batch: int, hv: int, dk: int) -> bool:
    """What the fused decode kernels need of everything but q/k/v (z's dtype is the activations' dtype)."""
    return (
        all(t.dtype == z.dtype for t in (a, b, a_log, dt_bias, norm_weight)) and a.shape == (batch, hv)
        and b.shape == a.shape and a_log.shape == (hv,) and dt_bias.shape == a_log.shape
        and norm_weight.shape == (128,) and all(t.stride(-1) == 1 for t in (a, b, z)) and a_log.is_contiguous()
        and dt_bias.is_contiguous() and norm_weight.is_contiguous() and states.dtype == torch.float32
        and states.is_contiguous() and states.data_ptr() % 16 == 0 and tuple(states.shape[1:]) == (hv, dk, 128)
    )


def _fused_params(q, k, v, a, b, a_log, dt_bias, z, norm_weight, states, state_indices, out, use_qk_l2norm,
                  eps) -> tuple[GdnFusedParams, torch.Tensor]:
    """The fused decode kernels' parameters, and the int64 state indices they point at (keep it alive)."""
    idx = state_indices.to(torch.int64).contiguous()
    p = GdnFusedParams(q.data_ptr(), k.data_ptr(), v.data_ptr(), a.data_ptr(), b.data_ptr(), a_log.data_ptr(),
                       dt_bias.data_ptr(), z.data_ptr(), norm_weight.data_ptr(), states.data_ptr(), idx.data_ptr(),
                       out.data_ptr(), q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
                       a.stride(0), b.stride(0), z.stride(0), z.stride(1), v.shape[0], q.shape[1], v.shape[1],
                       int(use_qk_l2norm), eps)
    return p, idx


def gated_delta_rule_decode_fused(q, k, v, a, b, a_log, dt_bias, z, norm_weight, eps, states, state_indices,
                                  use_qk_l2norm):
    code = _DTYPE.get(v.dtype)
    dk = q.shape[-1]
    ok = (
        code is not None and q.dtype == v.dtype and k.dtype == v.dtype
        and q.dim() == 3 and k.shape == q.shape and v.dim() == 3 and dk in (64, 128) and v.shape[2] == 128
        and v.shape[1] % q.shape[1] == 0 and z.shape == v.shape and all(t.stride(-1) == 1 for t in (q, k, v))
        and _fused_step_args_ok(a, b, a_log, dt_bias, z, norm_weight, states, v.shape[0], v.shape[1], dk)
    )
    if not ok:
        return ref_gdn.gated_delta_rule_decode_fused(q, k, v, a, b, a_log, dt_bias, z, norm_weight, eps, states,
                                                     state_indices, use_qk_l2norm)
    batch, hv, dv = v.shape
    out = torch.empty((batch, hv, dv), dtype=v.dtype, device=v.device)
    if batch == 0:
        return out
    p, _idx = _fused_params(q, k, v, a, b, a_log, dt_bias, z, norm_weight, states, state_indices, out,
                            use_qk_l2norm, eps)
    # arrival counters, one per (sequence, value head) and (sequence, key head), left zero by the kernel
    counters = native_ops._split_counters(v.device, batch * (hv + q.shape[1]))
    check(_lib().revolta_gdn_fused_decode(ctypes.byref(p), None, counters.data_ptr(), dk, code, _stream(v)))
    return out


def gated_delta_rule_decode_fused_conv(qkv, conv_weight, conv_states, a, b, a_log, dt_bias, z, norm_weight, eps,
                                       states, state_indices, use_qk_l2norm):
    batch, hv, dv = z.shape
    dk = states.shape[2] if states.dim() == 4 else 0
    key_dim = (qkv.shape[1] - hv * dv) // 2 if qkv.dim() == 2 else 0
    ok = (
        batch * hv < GDN_CONV_FUSED_MAX_BLOCKS and _DTYPE.get(z.dtype) is not None
        and qkv.dtype == z.dtype and dk in (64, 128) and dv == 128 and key_dim > 0 and key_dim % dk == 0
        and hv % (key_dim // dk) == 0 and qkv.shape[1] == 2 * key_dim + hv * dv
        and _conv_ok(qkv, conv_weight, None, conv_states)
    )
    # the fused kernel reads q/k/v through the conv; the views of qkv only carry shapes and strides
    y = qkv if ok else ops_gdn.causal_conv1d_update(qkv, conv_weight, None, conv_states, state_indices, True)
    q, k, v = y.split([key_dim, key_dim, hv * dv], dim=-1)
    q, k, v = q.reshape(batch, -1, dk), k.reshape(batch, -1, dk), v.reshape(batch, hv, dv)
    if not ok:
        return ops_gdn.gated_delta_rule_decode_fused(q, k, v, a, b, a_log, dt_bias, z, norm_weight, eps, states,
                                                        state_indices, use_qk_l2norm)
    if not _fused_step_args_ok(a, b, a_log, dt_bias, z, norm_weight, states, batch, hv, dk):
        return ref_gdn.gated_delta_rule_decode_fused_conv(qkv, conv_weight, conv_states, a, b, a_log, dt_bias, z,
                                                          norm_weight, eps, states, state_indices, use_qk_l2norm)
    out = torch.empty((batch, hv, dv), dtype=z.dtype, device=z.device)
    if batch == 0:
        return out
    p, _idx = _fused_params(q, k, v, a, b, a_log, dt_bias, z, norm_weight, states, state_indices, out,
                            use_qk_l2norm, eps)
    cv = GdnConvParams(qkv.data_ptr(), conv_weight.data_ptr(), conv_states.data_ptr(), qkv.stride(0),
                       qkv.shape[1], conv_weight.shape[1], key_dim)
    counters = native_ops._split_counters(z.device, batch * (hv + q.shape[1]))
    check(_lib().revolta_gdn_fused_decode(ctypes.byref(p), ctypes.byref(cv), counters.data_ptr(), dk,
                                          _DTYPE[z.dtype], _stream(z)))
    return out


def gated_delta_rule_prefill(q, k, v, g, beta, states, query_start_loc, state_indices, use_qk_l2norm,
                             snapshot_seq, snapshot_len, snapshot_slot):
    code = _DTYPE.get(v.dtype)
    dk = q.shape[-1]
    ok = (
        code is not None and q.dtype == v.dtype and k.dtype == v.dtype and q.dim() == 3 and k.shape == q.shape
        and v.dim() == 3 and dk in (64, 128) and v.shape[2] % 16 == 0 and v.shape[1] % q.shape[1] == 0
        and v.stride(-1) == 1 and states.dtype == torch.float32 and states.is_contiguous()
        and tuple(states.shape[1:]) == (v.shape[1], dk, v.shape[2]) and g.shape == v.shape[:2]
        and beta.shape == v.shape[:2]
    )
    if not ok:
        return ref_gdn.gated_delta_rule_chunked(q, k, v, g, beta, states, query_start_loc, state_indices,
                                                use_qk_l2norm, snapshot_seq, snapshot_len, snapshot_slot)
    epl = dk // 32  # q/k elements each lane loads at once
    q = q if q.stride(-1) == 1 and _aligned(q, epl) else q.contiguous()
    k = k if k.stride(-1) == 1 and _aligned(k, epl) else k.contiguous()
    t, hv, dv = v.shape
    out = torch.empty((t, hv, dv), dtype=v.dtype, device=v.device)
    num_seqs = state_indices.shape[0]
    if num_seqs == 0:
        return out
    gf, bt = _decay_beta(g, beta, v.dtype)
    idx = state_indices.to(torch.int64).contiguous()
    qsl = query_start_loc.to(torch.int32).contiguous()
    offsets, s_len, s_slot = _sorted_snapshots(snapshot_seq, snapshot_len, snapshot_slot, num_seqs)
    p = GdnPrefillParams(q.data_ptr(), k.data_ptr(), v.data_ptr(), gf.data_ptr(), bt.data_ptr(), states.data_ptr(),
                         idx.data_ptr(), qsl.data_ptr(), _ptr_of(offsets), _ptr_of(s_len), _ptr_of(s_slot),
                         out.data_ptr(), q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0),
                         v.stride(1), gf.stride(0), bt.stride(0), num_seqs, q.shape[1], hv, dv, int(use_qk_l2norm))
    check(_lib().revolta_gdn_prefill(ctypes.byref(p), dk, code, _stream(v)))
    return out


def gdn_gating(a, b, a_log, dt_bias):
    code = _DTYPE.get(a.dtype)
    ok = (
        code is not None and b.dtype == a.dtype and a_log.dtype == a.dtype and dt_bias.dtype == a.dtype
        and a.dim() == 2 and b.shape == a.shape and a_log.shape == (a.shape[1],) and dt_bias.shape == a_log.shape
        and a.stride(-1) == 1 and b.stride(-1) == 1 and a_log.is_contiguous() and dt_bias.is_contiguous()
    )
    if not ok:
        return ref_gdn.gdn_gating(a, b, a_log, dt_bias)
    t, h = a.shape
    g = torch.empty((t, h), dtype=torch.float32, device=a.device)
    beta = torch.empty((t, h), dtype=a.dtype, device=a.device)
    check(_lib().revolta_gdn_gating(g.data_ptr(), beta.data_ptr(), a.data_ptr(), b.data_ptr(), a_log.data_ptr(),
                                    dt_bias.data_ptr(), t, h, a.stride(0), b.stride(0), code, _stream(a)))
    return g, beta


def rms_norm_gated(x, gate, weight, eps):
    code = _DTYPE.get(x.dtype)
    ok = (
        code is not None and gate.dtype == x.dtype and weight.dtype == x.dtype and gate.shape == x.shape
        and x.dim() in (2, 3) and weight.shape == (x.shape[-1],) and weight.is_contiguous()
        and x.stride(-1) == 1 and gate.stride(-1) == 1
    )
    if not ok:
        return ref_gdn.rms_norm_gated(x, gate, weight, eps)
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if x.dim() == 2:
        n0, n1, xs, gs = x.shape[0], 1, (x.stride(0), 0), (gate.stride(0), 0)
    else:
        n0, n1, xs, gs = x.shape[0], x.shape[1], x.stride()[:2], gate.stride()[:2]
    check(_lib().revolta_rms_norm_gated(out.data_ptr(), x.data_ptr(), gate.data_ptr(), weight.data_ptr(), n0, n1,
                                        x.shape[-1], xs[0], xs[1], gs[0], gs[1], eps, code, _stream(x)))
    return out


# --------------------------------------------------------------------------------------- causal conv1d
def _conv_ok(x, weight, bias, conv_states) -> bool:
    k = weight.shape[-1] if weight.dim() == 2 else 0
    return (
        _DTYPE.get(x.dtype) is not None and x.dim() == 2 and weight.dim() == 2 and 2 <= k <= 8
        and weight.shape[0] == x.shape[1] and weight.dtype == x.dtype and weight.is_contiguous()
        and (bias is None or (bias.dtype == x.dtype and bias.is_contiguous() and bias.shape == (x.shape[1],)))
        and conv_states.dtype == x.dtype and conv_states.is_contiguous()
        and tuple(conv_states.shape[1:]) == (x.shape[1], k - 1) and x.stride(-1) == 1
    )


def causal_conv1d_update(x, weight, bias, conv_states, state_indices, silu):
    if not _conv_ok(x, weight, bias, conv_states):
        return ref_conv.causal_conv1d_update(x, weight, bias, conv_states, state_indices, silu)
    b, c = x.shape
    out = torch.empty((b, c), dtype=x.dtype, device=x.device)
    idx = state_indices.to(torch.int64).contiguous()
    check(_lib().revolta_conv1d_update(out.data_ptr(), x.data_ptr(), x.stride(0), weight.data_ptr(), _ptr_of(bias),
                                       conv_states.data_ptr(), idx.data_ptr(), b, c, weight.shape[1], int(silu),
                                       _DTYPE[x.dtype], _stream(x)))
    return out


def causal_conv1d(x, weight, bias, conv_states, query_start_loc, state_indices, silu, snapshot_seq, snapshot_len,
                  snapshot_slot):
    if not _conv_ok(x, weight, bias, conv_states):
        return ref_conv.causal_conv1d(x, weight, bias, conv_states, query_start_loc, state_indices, silu,
                                      snapshot_seq, snapshot_len, snapshot_slot)
    xc = x.contiguous()
    t, c = xc.shape
    out = torch.empty((t, c), dtype=x.dtype, device=x.device)
    num_seqs = state_indices.shape[0]
    idx = state_indices.to(torch.int64).contiguous()
    qsl = query_start_loc.to(torch.int32).contiguous()
    offsets, s_len, s_slot = _sorted_snapshots(snapshot_seq, snapshot_len, snapshot_slot, num_seqs)
    check(_lib().revolta_conv1d_prefill(out.data_ptr(), xc.data_ptr(), weight.data_ptr(), _ptr_of(bias),
                                        conv_states.data_ptr(), qsl.data_ptr(), idx.data_ptr(), _ptr_of(offsets),
                                        _ptr_of(s_len), _ptr_of(s_slot), t, num_seqs, c, weight.shape[1], int(silu),
                                        _DTYPE[x.dtype], _stream(x)))
    return out


def register() -> bool:
    """Register the CUDA implementations; False if the loaded library predates these kernels."""
    if not native.bind(_SIGNATURES, (GdnDecodeParams, GdnFusedParams, GdnPrefillParams, GdnConvParams)):
        return False
    ops_gdn.gated_delta_rule_decode.register_kernel("cuda")(gated_delta_rule_decode)
    ops_gdn.gated_delta_rule_decode_fused.register_kernel("cuda")(gated_delta_rule_decode_fused)
    ops_gdn.gated_delta_rule_decode_fused_conv.register_kernel("cuda")(gated_delta_rule_decode_fused_conv)
    ops_gdn.gated_delta_rule_prefill.register_kernel("cuda")(gated_delta_rule_prefill)
    ops_gdn.gdn_gating.register_kernel("cuda")(gdn_gating)
    ops_gdn.rms_norm_gated.register_kernel("cuda")(rms_norm_gated)
    ops_gdn.causal_conv1d_update.register_kernel("cuda")(causal_conv1d_update)
    ops_gdn.causal_conv1d.register_kernel("cuda")(causal_conv1d)
    return True
