"""The KV-cache write and paged-attention ops (re-exported by :mod:`revolta_kernels.ops`, where the PDL contract
for their step inputs is described): cache writes with and without rotary and per-head q/k norms, decode and
prefill attention over the paged cache, and rotary + cache write + attention as one op."""

from __future__ import annotations

import torch

from revolta_kernels import reference as ref
from revolta_kernels.ops_common import LIB, CpuShortcut
from revolta_kernels.reference import cpu_fast
from revolta_kernels.reference.decode_attention import paged_attention_chunks, paged_attention_short_queries


@torch.library.custom_op(
    f"{LIB}::reshape_and_cache", mutates_args=("key_cache", "value_cache", "k_scales", "v_scales")
)
def _reshape_and_cache(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                       slot_mapping: torch.Tensor, k_scales: torch.Tensor | None,
                       v_scales: torch.Tensor | None) -> None:
    ref.reshape_and_cache(key, value, key_cache, value_cache, slot_mapping, k_scales, v_scales)


@_reshape_and_cache.register_fake
def _(key, value, key_cache, value_cache, slot_mapping, k_scales, v_scales):
    return None


def reshape_and_cache(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                      slot_mapping: torch.Tensor, k_scales: torch.Tensor | None = None,
                      v_scales: torch.Tensor | None = None) -> None:
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
def _rotary_and_cache(positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      cos_sin_cache: torch.Tensor, is_neox: bool, key_cache: torch.Tensor, value_cache: torch.Tensor,
                      slot_mapping: torch.Tensor, k_scales: torch.Tensor | None,
                      v_scales: torch.Tensor | None) -> torch.Tensor:
    return ref.rotary_and_cache(positions, query, key, value, cos_sin_cache, is_neox, key_cache, value_cache,
                                slot_mapping, k_scales, v_scales)


@_rotary_and_cache.register_fake
def _(positions, query, key, value, cos_sin_cache, is_neox, key_cache, value_cache, slot_mapping, k_scales, v_scales):
    return torch.empty(query.shape, dtype=query.dtype, device=query.device)


def rotary_and_cache(positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     cos_sin_cache: torch.Tensor, is_neox: bool, key_cache: torch.Tensor, value_cache: torch.Tensor,
                     slot_mapping: torch.Tensor, k_scales: torch.Tensor | None = None,
                     v_scales: torch.Tensor | None = None) -> torch.Tensor:
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
def _qk_norm_rotary_and_cache(positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                              q_norm_weight: torch.Tensor, k_norm_weight: torch.Tensor, eps: float, zero_centered: bool,
                              cos_sin_cache: torch.Tensor, is_neox: bool, key_cache: torch.Tensor,
                              value_cache: torch.Tensor, slot_mapping: torch.Tensor, k_scales: torch.Tensor | None,
                              v_scales: torch.Tensor | None) -> torch.Tensor:
    return ref.qk_norm_rotary_and_cache(positions, query, key, value, q_norm_weight, k_norm_weight, eps,
                                        zero_centered, cos_sin_cache, is_neox, key_cache, value_cache,
                                        slot_mapping, k_scales, v_scales)


@_qk_norm_rotary_and_cache.register_fake
def _(positions, query, key, value, q_norm_weight, k_norm_weight, eps, zero_centered, cos_sin_cache, is_neox,
      key_cache, value_cache, slot_mapping, k_scales, v_scales):
    return torch.empty(query.shape, dtype=query.dtype, device=query.device)


def qk_norm_rotary_and_cache(positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                             q_norm_weight: torch.Tensor, k_norm_weight: torch.Tensor, eps: float, zero_centered: bool,
                             cos_sin_cache: torch.Tensor, is_neox: bool, key_cache: torch.Tensor,
                             value_cache: torch.Tensor, slot_mapping: torch.Tensor,
                             k_scales: torch.Tensor | None = None,
                             v_scales: torch.Tensor | None = None) -> torch.Tensor:
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
    def op(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, block_tables: torch.Tensor,
           context_lens: torch.Tensor, query_start_loc: torch.Tensor, max_query_len: int, scale: float,
           k_scales: torch.Tensor | None = None, v_scales: torch.Tensor | None = None) -> torch.Tensor:
        return cpu_impl(query, key_cache, value_cache, block_tables, context_lens, query_start_loc,
                        max_query_len, scale, k_scales, v_scales)

    @op.register_fake
    def _(query, key_cache, value_cache, block_tables, context_lens, query_start_loc, max_query_len, scale,
          k_scales=None, v_scales=None):
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


paged_attention_decode = CpuShortcut(paged_attention_decode, paged_attention_short_queries)
paged_attention_prefill = CpuShortcut(paged_attention_prefill, paged_attention_chunks)


def paged_attention(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, block_tables: torch.Tensor,
                    context_lens: torch.Tensor, query_start_loc: torch.Tensor, max_query_len: int, scale: float,
                    k_scales: torch.Tensor | None = None, v_scales: torch.Tensor | None = None) -> torch.Tensor:
    """Pick the decode kernel for short query runs and the prefill kernel otherwise."""
    op = paged_attention_decode if max_query_len <= 8 else paged_attention_prefill
    return op(query, key_cache, value_cache, block_tables, context_lens, query_start_loc, max_query_len, scale,
              k_scales, v_scales)


@torch.library.custom_op(
    f"{LIB}::rotary_cache_and_attention", mutates_args=("key_cache", "value_cache", "k_scales", "v_scales")
)
def _rotary_cache_and_attention(positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                                cos_sin_cache: torch.Tensor, is_neox: bool, key_cache: torch.Tensor,
                                value_cache: torch.Tensor, slot_mapping: torch.Tensor, block_tables: torch.Tensor,
                                context_lens: torch.Tensor, query_start_loc: torch.Tensor, max_query_len: int,
                                scale: float, k_scales: torch.Tensor | None,
                                v_scales: torch.Tensor | None) -> torch.Tensor:
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


def rotary_cache_and_attention(positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                               cos_sin_cache: torch.Tensor, is_neox: bool, key_cache: torch.Tensor,
                               value_cache: torch.Tensor, slot_mapping: torch.Tensor, block_tables: torch.Tensor,
                               context_lens: torch.Tensor, query_start_loc: torch.Tensor, max_query_len: int,
                               scale: float, k_scales: torch.Tensor | None = None,
                               v_scales: torch.Tensor | None = None) -> torch.Tensor:
    """:func:`rotary_and_cache` then :func:`paged_attention` on the rotated query; returns the attention
    output [T, H, D]. On CUDA, a decode step of few sequences with an fp16 cache runs as one kernel (the
    vec decode kernel rotates q and the new k itself and writes the cache); anything else, and the CPU,
    runs the two ops."""
    if query.device.type == "cpu" and not torch.compiler.is_compiling():
        return _rope_cache_attention_two_ops(
            positions, query, key, value, cos_sin_cache, is_neox, key_cache, value_cache, slot_mapping,
            block_tables, context_lens, query_start_loc, max_query_len, scale, k_scales, v_scales)
    return _rotary_cache_and_attention(positions, query, key, value, cos_sin_cache, is_neox, key_cache, value_cache,
                                       slot_mapping, block_tables, context_lens, query_start_loc, max_query_len,
                                       scale, k_scales, v_scales)
