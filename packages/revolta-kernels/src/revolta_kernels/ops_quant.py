"""Quantized-weight GEMM as torch custom ops (``revolta::quant_matmul``, ``revolta::quant_matmul_silu``,
``revolta::quant_matmul_add_rms_norm``, ``revolta::quant_qkv_rope_cache``, ``revolta::quant_moe_matmul``,
``revolta::quant_moe_down_combine``, ``revolta::quant_moe_gemm``), and the skinny dense linear ``revolta::dense_linear``.

The default implementation is the reference (dequantize, float32 matmul; the CPU path); the native CUDA
kernels register themselves for ``cuda`` in :mod:`revolta_kernels.native_quant` when the library is built.
The weight layout is documented in :mod:`revolta_kernels.reference.quant`. Several projections of the same
input (q/k/v, gate/up) are one call: their columns are concatenated along N.

``x_order`` (every quantized op; None = channel order): GPTQ act-order checkpoints whose packed rows were sorted
by group, so row ``k`` of ``W`` multiplies channel ``x_order[k]`` of the activation (``x``, ``silu(gate) * up``
or ``rms_norm(h)``): the op computes ``a[..., x_order] @ W``. An int32 (or int64) permutation of ``0..K-1``; the
skinny CUDA kernels gather while staging their activations, so no separate gather runs. ``h`` outputs stay in
channel order.

``int8_activations`` (the dense quantized ops; default False): calls of at most 8 rows (decode) round the
activations they multiply to int8, one symmetric scale per window of 64 channels (32 with 8-bit weights), and the
CUDA kernels multiply with dp4a: faster, not bit-equal to the fp16 path. The reference rounds the same way
(:func:`revolta_kernels.reference.quant.round_activations_int8`), so the argument has the same meaning on every
device; it is an argument of each call, so two models in one process can differ.
"""

from __future__ import annotations

import torch

from revolta_kernels.reference import quant as ref_quant

LIB = "revolta"
SKINNY_MAX_M = 8  # rows the skinny CUDA kernels (quantized and dense) take; above: tensor-core GEMM / cuBLAS
QKV_ROPE_MAX_M = 2  # rows (tokens) the q/k/v kernel with the rotary + cache epilogue takes (int4, group 128)


def check_order(x_order: torch.Tensor, channels: int) -> None:
    """Raise ValueError unless ``x_order`` holds one index per input channel."""
    if x_order.dim() != 1 or x_order.numel() != channels:
        raise ValueError(f"x_order must hold one index per input channel ({channels}), got shape "
                         f"{tuple(x_order.shape)}")


def in_order(a: torch.Tensor, x_order: torch.Tensor | None) -> torch.Tensor:
    """``a[..., x_order]`` (``a`` itself without an order); see :func:`check_order`."""
    if x_order is None:
        return a
    check_order(x_order, a.shape[-1])
    return a.index_select(-1, x_order.to(a.device))


@torch.library.custom_op(f"{LIB}::quant_matmul", mutates_args=())
def quant_matmul(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, qzeros: torch.Tensor, bits: int,
                 group_size: int, zero_offset: int, x_order: torch.Tensor | None = None,
                 int8_activations: bool = False) -> torch.Tensor:
    """``x[..., K] @ W[K, N]`` where ``W`` is the int4/int8 group-quantized matrix (kernel layout); with
    ``x_order``, ``x[..., x_order] @ W`` (module docstring)."""
    a = ref_quant.activations(in_order(x, x_order), bits, int8_activations)
    return ref_quant.quant_matmul(a, qweight, scales, qzeros, bits, group_size, zero_offset)


@quant_matmul.register_fake
def _(x, qweight, scales, qzeros, bits, group_size, zero_offset, x_order=None, int8_activations=False):
    return x.new_empty((*x.shape[:-1], qweight.shape[1]))


@torch.library.custom_op(f"{LIB}::quant_dequantize", mutates_args=())
def quant_dequantize(qweight: torch.Tensor, scales: torch.Tensor, qzeros: torch.Tensor, bits: int,
                     group_size: int, zero_offset: int) -> torch.Tensor:
    """The dense ``[K, N]`` weight in ``scales``' dtype (for checks and for layers that need it dense)."""
    return ref_quant.dequantize(qweight, scales, qzeros, bits, group_size, zero_offset).to(scales.dtype)


@quant_dequantize.register_fake
def _(qweight, scales, qzeros, bits, group_size, zero_offset):
    return scales.new_empty((qweight.shape[0] * (32 // bits), qweight.shape[1]))


def _silu_and_mul_ref(x: torch.Tensor) -> torch.Tensor:
    from revolta_kernels.reference.activation import silu_and_mul

    return silu_and_mul(x)


@torch.library.custom_op(f"{LIB}::quant_matmul_silu", mutates_args=())
def quant_matmul_silu(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, qzeros: torch.Tensor, bits: int,
                      group_size: int, zero_offset: int, x_order: torch.Tensor | None = None,
                      order_code: bool = False, int8_activations: bool = False) -> torch.Tensor:
    """``silu_and_mul(x) @ W``: the MLP's down projection straight from the gate_up output ``x[..., 2K]``.

    Reference = ``revolta::silu_and_mul`` (fp32 math, rounded to x's dtype), ``x_order`` applied, then
    :func:`quant_matmul`; the native skinny kernel (M <= 8) applies the activation while staging x, so no
    separate kernel runs. ``order_code`` is a schedule hint that leaves the result as it is: the native split-K
    call runs the act-order kernel's code even without ``x_order`` (a down projection after an act-order gate/up
    projection is faster in that gate/up's kernel function).
    """
    a = ref_quant.activations(in_order(_silu_and_mul_ref(x), x_order), bits, int8_activations)
    return ref_quant.quant_matmul(a, qweight, scales, qzeros, bits, group_size, zero_offset)


@quant_matmul_silu.register_fake
def _(x, qweight, scales, qzeros, bits, group_size, zero_offset, x_order=None, order_code=False,
      int8_activations=False):
    return x.new_empty((*x.shape[:-1], qweight.shape[1]))


@torch.library.custom_op(f"{LIB}::quant_moe_matmul", mutates_args=())
def quant_moe_matmul(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, qzeros: torch.Tensor,
                     ids: torch.Tensor, bits: int, group_size: int, zero_offset: int, act: int,
                     shared_id: int = -1) -> torch.Tensor:
    """Quantized mixture-of-experts projection of every routed (token, slot) row, ``[T, top_k, N]``: the expert
    ``ids[t, k]`` of the stacked kernel-layout experts (``qweight [E, K / pack, N]``, ``scales [E, K / G, N]``,
    ``qzeros [E, K / G, N / pack]``) applied to ``x[t]`` (act 0, ``x [T, K]``) or to ``silu_and_mul(x[t, k])``
    (act 1, ``x [T, top_k, 2K]``). ``shared_id >= 0`` adds a last row per token for that expert (a shared expert
    stacked with the routed ones; ``[T, top_k + 1, N]``). The expert choice stays on the device, so the call can be
    captured in a CUDA graph (the native kernel, csrc/quant_moe.cuh, reads ``ids`` itself). Reference: one matmul
    per expert."""
    return ref_quant.quant_moe_matmul(x, qweight, scales, qzeros, ids, bits, group_size, zero_offset, act,
                                      shared_id)


@quant_moe_matmul.register_fake
def _(x, qweight, scales, qzeros, ids, bits, group_size, zero_offset, act, shared_id=-1):
    return x.new_empty((ids.shape[0], ids.shape[1] + (1 if shared_id >= 0 else 0), qweight.shape[-1]))


@torch.library.custom_op(f"{LIB}::quant_moe_gemm", mutates_args=())
def quant_moe_gemm(x: torch.Tensor, offsets: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor,
                   qzeros: torch.Tensor, bits: int, group_size: int, zero_offset: int,
                   x_rows: torch.Tensor | None = None, x_row_div: int = 1, out_rows: torch.Tensor | None = None,
                   silu: bool = False) -> torch.Tensor:
    """Stacked kernel-layout quantized experts over ``R`` rows sorted by expert, ``[R, N]``: sorted row ``r`` gives
    ``a[r] @ W[e]`` for ``offsets[e] <= r < offsets[e + 1]`` (int64 ``[E + 1]``, on ``x``'s device), rows past
    ``offsets[E]`` zeros -- a MoE layer's prefill in one call per projection. ``a[r]`` is ``x[r]``, or
    ``x[x_rows[r] // x_row_div]`` (gather each sorted row's token); ``out_rows`` (a permutation) puts row ``r``'s
    result at row ``out_rows[r]``; ``silu`` (columns ``[gate, up]``) returns ``silu_and_mul`` of the rows, ``[R, N /
    2]``. On a GPU one tensor-core kernel runs every expert (csrc/quant_moe_gemm.cuh), gather, scatter and SiLU
    included, with no host sync. Reference: one matmul per expert."""
    return ref_quant.quant_moe_gemm(x, offsets, qweight, scales, qzeros, bits, group_size, zero_offset, x_rows,
                                    x_row_div, out_rows, silu)


@quant_moe_gemm.register_fake
def _(x, offsets, qweight, scales, qzeros, bits, group_size, zero_offset, x_rows=None, x_row_div=1, out_rows=None,
      silu=False):
    n = qweight.shape[-1] // 2 if silu else qweight.shape[-1]
    return x.new_empty((x.shape[0] if x_rows is None else x_rows.shape[0], n))


@torch.library.custom_op(f"{LIB}::quant_moe_down_combine", mutates_args=())
def quant_moe_down_combine(h: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, qzeros: torch.Tensor,
                           ids: torch.Tensor, weights: torch.Tensor, bits: int, group_size: int, zero_offset: int,
                           shared_id: int = -1, x: torch.Tensor | None = None,
                           shared_gate: torch.Tensor | None = None) -> torch.Tensor:
    """The last half of a quantized MoE layer, ``[T, N]``: ``revolta::quant_moe_matmul`` (act 1: SiLU-and-mul of
    each row of ``h [T, R, 2K]``, then that row's expert's down projection) and ``revolta::moe_combine`` (the routed
    rows weighted by ``weights [T, top_k]`` float32, plus ``sigmoid(x @ shared_gate) * `` the shared expert's row
    when ``shared_id >= 0``). On a GPU one token runs both in one kernel (csrc/quant_moe_combine.cuh, where its
    shared memory fits: see :mod:`revolta_kernels.native_quant_moe`)."""
    return ref_quant.quant_moe_down_combine(h, qweight, scales, qzeros, ids, weights, bits, group_size, zero_offset,
                                            shared_id, x, shared_gate)


@quant_moe_down_combine.register_fake
def _(h, qweight, scales, qzeros, ids, weights, bits, group_size, zero_offset, shared_id=-1, x=None,
      shared_gate=None):
    return h.new_empty((ids.shape[0], qweight.shape[-1]))


def _add_rms_norm_ref(x: torch.Tensor, residual: torch.Tensor | None, norm_weight: torch.Tensor, eps: float,
                      zero_centered: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """``(norm(h), h)`` for ``h = x + residual`` (``h = x`` without a residual), as ``revolta::fused_add_rms_norm``
    / ``revolta::rms_norm`` compute them; ``h`` is a new tensor (a copy of ``x`` without a residual, as an op's
    output must not alias its input)."""
    from revolta_kernels.reference import norm as ref_norm

    if residual is None:
        return ref_norm.rms_norm(x, norm_weight, eps, zero_centered), x.clone()
    return ref_norm.fused_add_rms_norm(x, residual, norm_weight, eps, zero_centered)


@torch.library.custom_op(f"{LIB}::quant_matmul_add_rms_norm", mutates_args=())
def quant_matmul_add_rms_norm(x: torch.Tensor, residual: torch.Tensor | None, norm_weight: torch.Tensor, eps: float,
                              zero_centered: bool, qweight: torch.Tensor, scales: torch.Tensor, qzeros: torch.Tensor,
                              bits: int, group_size: int, zero_offset: int, x_order: torch.Tensor | None = None,
                              int8_activations: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rms_norm(h) @ W, h)`` for ``h = x + residual`` (or ``h = x`` when ``residual`` is None): the first
    projection of a pre-norm block with the residual add + RMSNorm before it (``zero_centered``: weight 1 + w;
    ``x_order``: ``rms_norm(h)[..., x_order] @ W``, h in channel order).

    Reference = ``revolta::fused_add_rms_norm`` (``revolta::rms_norm`` without a residual) then
    :func:`quant_matmul`; ``h`` is always a new tensor. The native skinny kernel (M <= 8) computes the norm
    while staging its activations (every block sums h^2 over the whole row; one block writes ``h``), so no
    separate norm kernel runs.
    """
    normed, h = _add_rms_norm_ref(x, residual, norm_weight, eps, zero_centered)
    a = ref_quant.activations(in_order(normed, x_order), bits, int8_activations)
    return ref_quant.quant_matmul(a, qweight, scales, qzeros, bits, group_size, zero_offset), h


@quant_matmul_add_rms_norm.register_fake
def _(x, residual, norm_weight, eps, zero_centered, qweight, scales, qzeros, bits, group_size, zero_offset,
      x_order=None, int8_activations=False):
    return x.new_empty((*x.shape[:-1], qweight.shape[1])), torch.empty_like(x)


@torch.library.custom_op(f"{LIB}::quant_qkv_rope_cache", mutates_args=("key_cache", "value_cache", "k_scales", "v_scales"))
def quant_qkv_rope_cache(x: torch.Tensor, residual: torch.Tensor | None, norm_weight: torch.Tensor, eps: float,
                         zero_centered: bool, qweight: torch.Tensor, scales: torch.Tensor, qzeros: torch.Tensor,
                         bits: int, group_size: int, zero_offset: int, positions: torch.Tensor,
                         cos_sin_cache: torch.Tensor, is_neox: bool, num_heads: int, key_cache: torch.Tensor,
                         value_cache: torch.Tensor, slot_mapping: torch.Tensor, k_scales: torch.Tensor | None,
                         v_scales: torch.Tensor | None, x_order: torch.Tensor | None = None,
                         int8_activations: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """A pre-norm attention block's start: ``(q, h)`` where ``h = x + residual``, ``[q | k | v] = rms_norm(h) @ W``
    (W's columns: ``num_heads`` query heads, then the cache's KV heads of keys and of values), q and k rotated, and
    the rotated k and v written into the paged cache at ``slot_mapping`` (``revolta::rotary_and_cache``'s rules);
    q is ``[T, num_heads, head_dim]``. ``x_order``: as :func:`quant_matmul_add_rms_norm`'s.

    Reference = :func:`quant_matmul_add_rms_norm` then ``revolta::rotary_and_cache``. The native CUDA kernel
    (int4 group 128, up to ``QKV_ROPE_MAX_M`` tokens, fp16 cache) rotates and stores in the projection's own
    epilogue, so no rotary kernel runs; other calls run the two ops.
    """
    return qkv_rope_two_steps(x, residual, norm_weight, eps, zero_centered, qweight, scales, qzeros, bits, group_size,
                              zero_offset, positions, cos_sin_cache, is_neox, num_heads, key_cache, value_cache,
                              slot_mapping, k_scales, v_scales, x_order, int8_activations)


@quant_qkv_rope_cache.register_fake
def _(x, residual, norm_weight, eps, zero_centered, qweight, scales, qzeros, bits, group_size, zero_offset, positions,
      cos_sin_cache, is_neox, num_heads, key_cache, value_cache, slot_mapping, k_scales, v_scales, x_order=None,
      int8_activations=False):
    tokens = x.numel() // x.shape[-1] if x.shape[-1] else 0
    return x.new_empty((tokens, num_heads, key_cache.shape[-1])), torch.empty_like(x)


def qkv_rope_two_steps(x, residual, norm_weight, eps, zero_centered, qweight, scales, qzeros, bits, group_size,
                       zero_offset, positions, cos_sin_cache, is_neox, num_heads, key_cache, value_cache, slot_mapping,
                       k_scales, v_scales, x_order=None, int8_activations=False) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`quant_qkv_rope_cache` as two ops: :func:`quant_matmul_add_rms_norm`, then ``revolta::rotary_and_cache``
    on its q/k/v (the reference, and the CUDA implementation's path where the fused kernel does not apply)."""
    from revolta_kernels.ops_attention import rotary_and_cache

    qkv, h = quant_matmul_add_rms_norm(x, residual, norm_weight, eps, zero_centered, qweight, scales, qzeros, bits,
                                       group_size, zero_offset, x_order, int8_activations)
    q, k, v = split_qkv(qkv, num_heads, key_cache.shape[1], key_cache.shape[-1])
    return rotary_and_cache(positions, q, k, v, cos_sin_cache, is_neox, key_cache, value_cache, slot_mapping,
                            k_scales, v_scales), h


def split_qkv(qkv: torch.Tensor, num_heads: int, num_kv_heads: int,
              head_dim: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``[T, (H + 2 Hkv) D]`` -> q ``[T, H, D]``, k and v ``[T, Hkv, D]`` (views)."""
    qkv = qkv.reshape(-1, qkv.shape[-1])
    q_size, kv_size = num_heads * head_dim, num_kv_heads * head_dim
    q, k, v = qkv.split([q_size, kv_size, kv_size], dim=-1)
    return (q.view(-1, num_heads, head_dim), k.view(-1, num_kv_heads, head_dim),
            v.view(-1, num_kv_heads, head_dim))


@torch.library.custom_op(f"{LIB}::dense_linear", mutates_args=())
def dense_linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``F.linear(x, weight)`` without bias.

    The native CUDA kernel is a skinny fp16 GEMV for up to 8 rows (decode), launched with programmatic
    dependent launch; other calls run ``F.linear`` (cuBLAS on CUDA). Reference = ``F.linear``.
    """
    return torch.nn.functional.linear(x, weight)


@dense_linear.register_fake
def _(x, weight):
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


@torch.library.custom_op(f"{LIB}::dense_linear_add_rms_norm", mutates_args=())
def dense_linear_add_rms_norm(x: torch.Tensor, residual: torch.Tensor | None, norm_weight: torch.Tensor, eps: float,
                              zero_centered: bool, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(F.linear(rms_norm(h), weight), h)`` for ``h = x + residual`` (``h = x`` when ``residual`` is None; always
    returned as a new tensor): a pre-norm block's residual add, RMSNorm and first projection (no bias).

    Reference = ``revolta::fused_add_rms_norm`` (or ``rms_norm``) then ``F.linear``. The native CUDA kernel (fp16,
    up to 8 rows) is the skinny GEMV computing the add and the norm while it stages its activations: ``h`` equals
    the reference bit for bit, the output is within the GEMV's bound (the normed activation is not rounded to
    fp16 before the products). Other calls run the two native ops.
    """
    normed, h = _add_rms_norm_ref(x, residual, norm_weight, eps, zero_centered)
    return torch.nn.functional.linear(normed, weight), h


@dense_linear_add_rms_norm.register_fake
def _(x, residual, norm_weight, eps, zero_centered, weight):
    return x.new_empty((*x.shape[:-1], weight.shape[0])), torch.empty_like(x)
