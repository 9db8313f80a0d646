"""Reference attention over a paged KV cache (decode, speculative verification and chunked prefill)."""

from __future__ import annotations

import torch

from revolta_kernels.reference.cache import dequantize_kv


def _gather_kv(
    cache: torch.Tensor, scales: torch.Tensor | None, block_table: torch.Tensor, ctx_len: int
) -> torch.Tensor:
    """Return [ctx_len, num_kv_heads, head_dim] float32 for one sequence."""
    block_size = cache.shape[2]
    n_blocks = (ctx_len + block_size - 1) // block_size
    ids = block_table[:n_blocks].long()
    quantized = cache.dtype == torch.int8 and scales is not None
    # index_select, not cache[ids]: advanced indexing is orders of magnitude slower on large CPU tensors.
    kv = dequantize_kv(cache.index_select(0, ids), scales.index_select(0, ids) if quantized else None)
    return kv.permute(0, 2, 1, 3).reshape(-1, cache.shape[1], cache.shape[3])[:ctx_len]


def paged_attention(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, block_tables: torch.Tensor,
                    context_lens: torch.Tensor, query_start_loc: torch.Tensor, scale: float,
                    k_scales: torch.Tensor | None = None, v_scales: torch.Tensor | None = None) -> torch.Tensor:
    """Causal attention of new query tokens over each sequence's whole context in the paged cache.

    Args:
        query: [num_tokens, num_heads, head_dim]; sequence ``b`` owns rows
            ``query_start_loc[b]:query_start_loc[b + 1]``, its last ``q_len`` tokens.
        key_cache, value_cache: see :mod:`revolta_kernels.reference.cache`; the new tokens' K/V are
            already written.
        block_tables: [num_seqs, max_blocks] int32 block ids.
        context_lens: [num_seqs] total tokens of each sequence including the new ones.
        query_start_loc: [num_seqs + 1] int32 prefix sums of query lengths.
        scale: softmax scale.
    Returns:
        [num_tokens, num_heads, head_dim] in ``query``'s dtype. Query token ``i`` of a sequence with
        ``q_len`` new tokens and ``L`` total sees positions ``< L - q_len + i + 1``.
    """
    num_heads = query.shape[1]
    out = torch.empty_like(query)
    starts = query_start_loc.tolist()
    lens = context_lens.tolist()
    for b, ctx_len in enumerate(lens):
        q0, q1 = starts[b], starts[b + 1]
        q_len = q1 - q0
        if q_len == 0:
            continue
        k = _gather_kv(key_cache, k_scales, block_tables[b], ctx_len)
        v = _gather_kv(value_cache, v_scales, block_tables[b], ctx_len)
        group = num_heads // k.shape[1]
        k = k.repeat_interleave(group, dim=1).transpose(0, 1)  # [H, L, D]
        v = v.repeat_interleave(group, dim=1).transpose(0, 1)
        q = query[q0:q1].float().transpose(0, 1)  # [H, q_len, D]
        scores = torch.matmul(q, k.transpose(1, 2)) * scale  # [H, q_len, L]
        q_pos = torch.arange(ctx_len - q_len, ctx_len, device=query.device).unsqueeze(1)
        k_pos = torch.arange(ctx_len, device=query.device).unsqueeze(0)
        scores = scores.masked_fill(k_pos > q_pos, float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        out[q0:q1] = torch.matmul(probs, v).transpose(0, 1).to(query.dtype)
    return out
