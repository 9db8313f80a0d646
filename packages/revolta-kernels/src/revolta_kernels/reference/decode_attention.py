"""Batched CPU path for short query runs (decode, speculative verification).

Same semantics as :func:`revolta_kernels.reference.paged_attention`, computed for the whole batch with a
handful of tensor ops instead of a loop over sequences; tested against that loop.
"""

from __future__ import annotations

import torch

from revolta_kernels.reference.cache import dequantize_kv


def _gather_padded(cache: torch.Tensor, scales: torch.Tensor | None, block_tables: torch.Tensor,
                   n_blocks: int) -> torch.Tensor:
    """[num_seqs, num_kv_heads, n_blocks * block_size, head_dim] float32 (padding past each context)."""
    ids = block_tables[:, :n_blocks].reshape(-1).long()
    quantized = cache.dtype == torch.int8 and scales is not None
    kv = dequantize_kv(cache.index_select(0, ids), scales.index_select(0, ids) if quantized else None)
    b = block_tables.shape[0]
    _, h, bs, d = kv.shape
    return kv.view(b, n_blocks, h, bs, d).permute(0, 2, 1, 3, 4).reshape(b, h, n_blocks * bs, d)


def paged_attention_short_queries(
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
    """Attention for batches whose sequences each bring at most ``max_query_len`` (small) new tokens."""
    num_tokens, num_heads, head_dim = query.shape
    num_seqs = block_tables.shape[0]
    num_kv_heads = key_cache.shape[1]
    group = num_heads // num_kv_heads
    block_size = key_cache.shape[2]
    ctx = context_lens.long()
    qsl = query_start_loc.long()
    q_lens = qsl[1:] - qsl[:-1]
    n_blocks = int((ctx.max() + block_size - 1) // block_size)
    k = _gather_padded(key_cache, k_scales, block_tables, n_blocks)  # [B, Hk, L, D]
    v = _gather_padded(value_cache, v_scales, block_tables, n_blocks)
    # Scatter queries into [B, Qmax, H, D]; row j of sequence b is its j-th new token.
    qmax = max_query_len
    seq_of_token = torch.repeat_interleave(torch.arange(num_seqs, device=query.device), q_lens)
    slot_of_token = torch.arange(num_tokens, device=query.device) - qsl[:-1].index_select(0, seq_of_token)
    q = query.new_zeros((num_seqs, qmax, num_heads, head_dim), dtype=torch.float32)
    q[seq_of_token, slot_of_token] = query.float()
    # [B, Hk, G * Qmax, D] so grouped query heads share their KV head without copying it.
    q = q.view(num_seqs, qmax, num_kv_heads, group, head_dim).permute(0, 2, 3, 1, 4)
    q = q.reshape(num_seqs, num_kv_heads, group * qmax, head_dim)
    scores = torch.matmul(q, k.transpose(-1, -2)) * scale  # [B, Hk, G*Qmax, L]
    length = k.shape[2]
    k_pos = torch.arange(length, device=query.device)
    q_idx = torch.arange(qmax, device=query.device)
    # Token j of a run of q_len ending at ctx sees positions < ctx - q_len + j + 1.
    limit = (ctx - q_lens).unsqueeze(1) + q_idx.unsqueeze(0) + 1  # [B, Qmax]
    mask = k_pos.view(1, 1, -1) >= limit.unsqueeze(-1)  # [B, Qmax, L]
    mask = mask.unsqueeze(1).unsqueeze(1).expand(num_seqs, num_kv_heads, group, qmax, length)
    scores = scores.view(num_seqs, num_kv_heads, group, qmax, length).masked_fill(mask, float("-inf"))
    probs = torch.softmax(scores.view(num_seqs, num_kv_heads, group * qmax, length), dim=-1)
    probs = torch.nan_to_num(probs, nan=0.0)  # padded query rows see nothing
    out = torch.matmul(probs, v)  # [B, Hk, G*Qmax, D]
    out = out.view(num_seqs, num_kv_heads, group, qmax, head_dim).permute(0, 3, 1, 2, 4)
    out = out.reshape(num_seqs, qmax, num_heads, head_dim)
    return out[seq_of_token, slot_of_token].to(query.dtype)
