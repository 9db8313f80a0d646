"""The public ops, registered once as torch custom ops (namespace ``revolta``).

Every op has a default implementation (the pure-torch reference, used on the CPU and wherever no native
kernel exists) and a fake implementation so torch.compile and CUDA graph capture can trace it. Native CUDA
kernels register themselves for the ``cuda`` device in :mod:`revolta_kernels.native` when the extension is
built and loadable.

On sm_90 and later the native kernels are launched with programmatic dependent launch (csrc/pdl.cuh): a kernel
may start while the one before it finishes. The decode-path kernels (rotary + cache write, paged attention) read
their step inputs (positions, slot mappings, block tables, context lengths) before waiting on that previous
kernel, so those inputs must be written by copies or ordinary kernels (torch's, or anything not launched with
PDL), never by a PDL kernel launched right before.
"""

from __future__ import annotations

import torch

from revolta_kernels import reference as ref
from revolta_kernels.reference import cpu_fast
from revolta_kernels.reference.decode_attention import paged_attention_chunks, paged_attention_short_queries

LIB = "revolta"


@torch.library.custom_op(f"{LIB}::rms_norm", mutates_args=())
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, zero_centered: bool = False) -> torch.Tensor:
    """RMSNorm over the last dimension (``zero_centered`` uses ``x_hat * (1 + w)``)."""
    return ref.rms_norm(x, weight, eps, zero_centered)


@rms_norm.register_fake
def _(x, weight, eps, zero_centered=False):
    return torch.empty_like(x)


@torch.library.custom_op(f"{LIB}::fused_add_rms_norm", mutates_args=())
def fused_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float, zero_centered: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """``residual += x`` then RMSNorm; returns ``(normed, new_residual)``."""
    return ref.fused_add_rms_norm(x, residual, weight, eps, zero_centered)


@fused_add_rms_norm.register_fake
def _(x, residual, weight, eps, zero_centered=False):
    return torch.empty_like(x), torch.empty_like(residual)


@torch.library.custom_op(f"{LIB}::silu_and_mul", mutates_args=())
def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """``silu(gate) * up`` where ``x = cat(gate, up)`` on the last dimension."""
    return ref.silu_and_mul(x)


@silu_and_mul.register_fake
def _(x):
    return x.new_empty((*x.shape[:-1], x.shape[-1] // 2))


@torch.library.custom_op(f"{LIB}::sigmoid_gate_mul", mutates_args=())
def sigmoid_gate_mul(x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """``x * sigmoid(gate)`` (torch's rounding) for ``x`` [T, H * D] and ``gate`` [T, H, D], which may be a
    strided view (Qwen3.5's attention output gate, interleaved with the query heads); returns [T, H * D]."""
    return ref.sigmoid_gate_mul(x, gate)


@sigmoid_gate_mul.register_fake
def _(x, gate):
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


@torch.library.custom_op(f"{LIB}::argmax", mutates_args=())
def argmax(x: torch.Tensor) -> torch.Tensor:
    """Index of the maximum of each row (last dimension) as int64, like ``torch.argmax(x, dim=-1)``: the
    first index of the maximum, NaN above every number. Greedy sampling's op (float32 logits)."""
    return x.argmax(dim=-1)


@argmax.register_fake
def _(x):
    return x.new_empty(x.shape[:-1], dtype=torch.int64)


@torch.library.custom_op(f"{LIB}::rotary_embedding", mutates_args=())
def rotary_embedding(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    is_neox: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotary embedding of query [T, H, D] and key [T, Hkv, D]; partial when ``rot_dim < D``."""
    return ref.rotary_embedding(positions, query, key, cos_sin_cache, is_neox)


@rotary_embedding.register_fake
def _(positions, query, key, cos_sin_cache, is_neox):
    return torch.empty_like(query), torch.empty_like(key)


@torch.library.custom_op(
    f"{LIB}::reshape_and_cache", mutates_args=("key_cache", "value_cache", "k_scales", "v_scales")
)
def _reshape_and_cache(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    k_scales: torch.Tensor | None,
    v_scales: torch.Tensor | None,
) -> None:
    ref.reshape_and_cache(key, value, key_cache, value_cache, slot_mapping, k_scales, v_scales)


@_reshape_and_cache.register_fake
def _(key, value, key_cache, value_cache, slot_mapping, k_scales, v_scales):
    return None


def reshape_and_cache(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    k_scales: torch.Tensor | None = None,
    v_scales: torch.Tensor | None = None,
) -> None:
    """Write new K/V [T, Hkv, D] into the paged cache (layout in :mod:`revolta_kernels.reference.cache`).

    The scales are required arguments of the registered op: torch 2.10 drops defaulted trailing arguments
    before bumping the versions of mutated ones, which fails for optional mutated tensors.
    """
    if key.device.type == "cpu" and not torch.compiler.is_compiling():
        ref.reshape_and_cache(key, value, key_cache, value_cache, slot_mapping, k_scales, v_scales)
        return
    _reshape_and_cache(key, value, key_cache, value_cache, slot_mapping, k_scales, v_scales)


@torch.library.custom_op(
    f"{LIB}::rotary_and_cache", mutates_args=("key_cache", "value_cache", "k_scales", "v_scales")
)
def _rotary_and_cache(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    is_neox: bool,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    k_scales: torch.Tensor | None,
    v_scales: torch.Tensor | None,
) -> torch.Tensor:
    return ref.rotary_and_cache(positions, query, key, value, cos_sin_cache, is_neox, key_cache, value_cache,
                                slot_mapping, k_scales, v_scales)


@_rotary_and_cache.register_fake
def _(positions, query, key, value, cos_sin_cache, is_neox, key_cache, value_cache, slot_mapping, k_scales, v_scales):
    return torch.empty(query.shape, dtype=query.dtype, device=query.device)


def rotary_and_cache(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    is_neox: bool,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    k_scales: torch.Tensor | None = None,
    v_scales: torch.Tensor | None = None,
) -> torch.Tensor:
    """Rotary on query [T, H, D] and key [T, Hkv, D], then the rotated key and ``value`` into the paged
    cache (as :func:`rotary_embedding` followed by :func:`reshape_and_cache`, one kernel on CUDA); returns
    the rotated query. On the CPU it runs exactly those two steps (the same code as the separate ops)."""
    if query.device.type == "cpu" and not torch.compiler.is_compiling():
        q, k = cpu_fast.rotary_embedding(positions, query, key, cos_sin_cache, is_neox)
        ref.reshape_and_cache(k, value, key_cache, value_cache, slot_mapping, k_scales, v_scales)
        return q
    return _rotary_and_cache(positions, query, key, value, cos_sin_cache, is_neox, key_cache, value_cache,
                             slot_mapping, k_scales, v_scales)


@torch.library.custom_op(
    f"{LIB}::qk_norm_rotary_and_cache", mutates_args=("key_cache", "value_cache", "k_scales", "v_scales")
)
def _qk_norm_rotary_and_cache(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    q_norm_weight: torch.Tensor,
    k_norm_weight: torch.Tensor,
    eps: float,
    zero_centered: bool,
    cos_sin_cache: torch.Tensor,
    is_neox: bool,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    k_scales: torch.Tensor | None,
    v_scales: torch.Tensor | None,
) -> torch.Tensor:
    return ref.qk_norm_rotary_and_cache(positions, query, key, value, q_norm_weight, k_norm_weight, eps,
                                        zero_centered, cos_sin_cache, is_neox, key_cache, value_cache,
                                        slot_mapping, k_scales, v_scales)


@_qk_norm_rotary_and_cache.register_fake
def _(positions, query, key, value, q_norm_weight, k_norm_weight, eps, zero_centered, cos_sin_cache, is_neox,
      key_cache, value_cache, slot_mapping, k_scales, v_scales):
    return torch.empty(query.shape, dtype=query.dtype, device=query.device)


def qk_norm_rotary_and_cache(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    q_norm_weight: torch.Tensor,
    k_norm_weight: torch.Tensor,
    eps: float,
    zero_centered: bool,
    cos_sin_cache: torch.Tensor,
    is_neox: bool,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    k_scales: torch.Tensor | None = None,
    v_scales: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-head RMSNorm of query [T, H, D] and key [T, Hkv, D] (weights [D]; ``zero_centered``: ``1 + w``),
    then :func:`rotary_and_cache`: one kernel on CUDA, the separate steps on the CPU (the same code as the
    separate ops, so CPU results do not change). Query and key may be strided views of a fused projection."""
    if query.device.type == "cpu" and not torch.compiler.is_compiling():
        q = cpu_fast.rms_norm(query, q_norm_weight, eps, zero_centered)
        k = cpu_fast.rms_norm(key, k_norm_weight, eps, zero_centered)
        return rotary_and_cache(positions, q, k, value, cos_sin_cache, is_neox, key_cache, value_cache,
                                slot_mapping, k_scales, v_scales)
    return _qk_norm_rotary_and_cache(positions, query, key, value, q_norm_weight, k_norm_weight, eps,
                                     zero_centered, cos_sin_cache, is_neox, key_cache, value_cache, slot_mapping,
                                     k_scales, v_scales)


def _attention_schema(name: str, doc: str, cpu_impl):
    @torch.library.custom_op(f"{LIB}::{name}", mutates_args=())
    def op(
        query: torch.Tensor,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
        block_tables: torch.Tensor,
        context_lens: torch.Tensor,
        query_start_loc: torch.Tensor,
        max_query_len: int,
        scale: float,
        k_scales: torch.Tensor | None = None,
        v_scales: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return cpu_impl(query, key_cache, value_cache, block_tables, context_lens, query_start_loc,
                        max_query_len, scale, k_scales, v_scales)

    @op.register_fake
    def _(
        query,
        key_cache,
        value_cache,
        block_tables,
        context_lens,
        query_start_loc,
        max_query_len,
        scale,
        k_scales=None,
        v_scales=None,
    ):
        return torch.empty_like(query)

    op.__doc__ = doc
    return op


paged_attention_decode = _attention_schema(
    "paged_attention_decode",
    "Attention of 1 to 8 new query tokens per sequence (decode, speculative verification) over the paged "
    "cache. Arguments as in :func:`revolta_kernels.reference.paged_attention`; ``max_query_len`` <= 8.",
    cpu_impl=paged_attention_short_queries,
)
paged_attention_prefill = _attention_schema(
    "paged_attention_prefill",
    "Causal attention of variable-length chunks of new tokens over their cached prefix plus themselves. "
    "Arguments as in :func:`revolta_kernels.reference.paged_attention`.",
    cpu_impl=paged_attention_chunks,
)


class _CpuShortcut:
    """A registered op that CPU tensors reach without the dispatcher.

    On the CPU the op's implementation is plain torch anyway (the reference, or its leaner float32 form in
    :mod:`revolta_kernels.reference.cpu_fast`), and the dispatcher's per-call cost is a noticeable share
    of a small model's decode step. Attribute access
    (``register_kernel``, ``register_fake``, ...) goes to the registered op.
    """

    def __init__(self, op, cpu_impl) -> None:
        self.op = op
        self.cpu_impl = cpu_impl
        self.__doc__ = op.__doc__

    def __call__(self, first: torch.Tensor, *args, **kwargs):
        if first.device.type == "cpu" and not torch.compiler.is_compiling():
            return self.cpu_impl(first, *args, **kwargs)
        return self.op(first, *args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self.op, name)


rms_norm = _CpuShortcut(rms_norm, cpu_fast.rms_norm)  # type: ignore[assignment]
fused_add_rms_norm = _CpuShortcut(fused_add_rms_norm, cpu_fast.fused_add_rms_norm)  # type: ignore[assignment]
silu_and_mul = _CpuShortcut(silu_and_mul, cpu_fast.silu_and_mul)  # type: ignore[assignment]
argmax = _CpuShortcut(argmax, lambda x: x.argmax(dim=-1))  # type: ignore[assignment]
sigmoid_gate_mul = _CpuShortcut(sigmoid_gate_mul, ref.sigmoid_gate_mul)  # type: ignore[assignment]
rotary_embedding = _CpuShortcut(rotary_embedding, cpu_fast.rotary_embedding)  # type: ignore[assignment]
paged_attention_decode = _CpuShortcut(paged_attention_decode, paged_attention_short_queries)
paged_attention_prefill = _CpuShortcut(paged_attention_prefill, paged_attention_chunks)


def paged_attention(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    query_start_loc: torch.Tensor,
    max_query_len: int,
    scale: float,
    k_scales: torch.Tensor | None = None,
    v_scales: torch.Tensor | None = None,
) -> torch.Tensor:
    """Pick the decode kernel for short query runs and the prefill kernel otherwise."""
    op = paged_attention_decode if max_query_len <= 8 else paged_attention_prefill
    return op(
        query,
        key_cache,
        value_cache,
        block_tables,
        context_lens,
        query_start_loc,
        max_query_len,
        scale,
        k_scales,
        v_scales,
    )


@torch.library.custom_op(
    f"{LIB}::rotary_cache_and_attention", mutates_args=("key_cache", "value_cache", "k_scales", "v_scales")
)
def _rotary_cache_and_attention(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    is_neox: bool,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    query_start_loc: torch.Tensor,
    max_query_len: int,
    scale: float,
    k_scales: torch.Tensor | None,
    v_scales: torch.Tensor | None,
) -> torch.Tensor:
    return _rope_cache_attention_two_ops(positions, query, key, value, cos_sin_cache, is_neox, key_cache,
                                         value_cache, slot_mapping, block_tables, context_lens, query_start_loc,
                                         max_query_len, scale, k_scales, v_scales)


def _rope_cache_attention_two_ops(positions, query, key, value, cos_sin_cache, is_neox, key_cache, value_cache,
                                  slot_mapping, block_tables, context_lens, query_start_loc, max_query_len, scale,
                                  k_scales, v_scales):
    """What rotary_cache_and_attention means: the two ops, one after the other (reference and fallback)."""
    q = rotary_and_cache(positions, query, key, value, cos_sin_cache, is_neox, key_cache, value_cache, slot_mapping,
                         k_scales, v_scales)
    return paged_attention(q, key_cache, value_cache, block_tables, context_lens, query_start_loc, max_query_len,
                           scale, k_scales, v_scales)


@_rotary_cache_and_attention.register_fake
def _(positions, query, key, value, cos_sin_cache, is_neox, key_cache, value_cache, slot_mapping, block_tables,
      context_lens, query_start_loc, max_query_len, scale, k_scales, v_scales):
    return torch.empty(query.shape, dtype=query.dtype, device=query.device)


def rotary_cache_and_attention(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    is_neox: bool,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    query_start_loc: torch.Tensor,
    max_query_len: int,
    scale: float,
    k_scales: torch.Tensor | None = None,
    v_scales: torch.Tensor | None = None,
) -> torch.Tensor:
    """:func:`rotary_and_cache` then :func:`paged_attention` on the rotated query; returns the attention
    output [T, H, D]. On CUDA, a decode step of few sequences with an fp16 cache runs as one kernel (the
    light decode kernel rotates q and the new k itself and writes the cache); anything else, and the CPU,
    runs the two ops."""
    if query.device.type == "cpu" and not torch.compiler.is_compiling():
        return _rope_cache_attention_two_ops(
            positions, query, key, value, cos_sin_cache, is_neox, key_cache, value_cache, slot_mapping,
            block_tables, context_lens, query_start_loc, max_query_len, scale, k_scales, v_scales)
    return _rotary_cache_and_attention(positions, query, key, value, cos_sin_cache, is_neox, key_cache, value_cache,
                                       slot_mapping, block_tables, context_lens, query_start_loc, max_query_len,
                                       scale, k_scales, v_scales)
