"""Fast CPU paths for paged attention, built on ``scaled_dot_product_attention``.

Same semantics as :func:`revolta_kernels.reference.paged_attention` (the oracle, a plain loop of
matmul/softmax) and tested against it. One fused SDPA call per batch (short queries) or per sequence
(prefill chunks) keeps the number of small parallel regions low, which matters on a busy 2-core CPU.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from revolta_kernels.reference.cache import dequantize_kv


def _gather(cache: torch.Tensor, scales: torch.Tensor | None, block_tables: torch.Tensor, n_blocks: int,
            dtype: torch.dtype) -> torch.Tensor:
    """[num_seqs, num_kv_heads, n_blocks * block_size, head_dim] (padding past each context)."""
    ids = block_tables[:, :n_blocks].reshape(-1).long()
    quantized = cache.dtype == torch.int8 and scales is not None
    kv = cache.index_select(0, ids)
    if quantized or kv.dtype != dtype:
        kv = dequantize_kv(kv, scales.index_select(0, ids) if quantized else None).to(dtype)
    b = block_tables.shape[0]
    _, h, bs, d = kv.shape
    return kv.view(b, n_blocks, h, bs, d).permute(0, 2, 1, 3, 4).reshape(b, h, n_blocks * bs, d)


def _compute_dtype(query: torch.Tensor) -> torch.dtype:
    # float32 inside on the CPU (half-precision SDPA there is slow and less accurate); native dtype on GPUs.
    return torch.float32 if query.device.type == "cpu" else query.dtype


def _single_token(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                  block_tables: torch.Tensor, ctx_len: int, scale: float, k_scales: torch.Tensor | None,
                  v_scales: torch.Tensor | None) -> torch.Tensor:
    """One sequence, one new token (batch-1 decode): it sees its whole context, so slicing replaces every mask."""
    _, num_heads, head_dim = query.shape
    num_kv_heads, block_size = key_cache.shape[1], key_cache.shape[2]
    dtype = _compute_dtype(query)
    n_blocks = (ctx_len + block_size - 1) // block_size
    ids = block_tables[0, :n_blocks]

    def context(cache: torch.Tensor, scales: torch.Tensor | None) -> torch.Tensor:  # [1, Hk, ctx_len, D]
        if cache.dtype != dtype:
            return _gather(cache, scales, block_tables, n_blocks, dtype)[:, :, :ctx_len]
        blocks = cache.index_select(0, ids)  # [n_blocks, Hk, block_size, D]
        if n_blocks > 1:
            blocks = blocks.transpose(0, 1).reshape(num_kv_heads, n_blocks * block_size, head_dim)
        return blocks.view(1, num_kv_heads, -1, head_dim)[:, :, :ctx_len]

    q = query.to(dtype).view(1, num_heads, 1, head_dim)
    out = F.scaled_dot_product_attention(q, context(key_cache, k_scales), context(value_cache, v_scales),
                                         scale=scale, enable_gqa=num_heads != num_kv_heads)
    return out.view(1, num_heads, head_dim).to(query.dtype)


def paged_attention_short_queries(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                                  block_tables: torch.Tensor, context_lens: torch.Tensor, query_start_loc: torch.Tensor,
                                  max_query_len: int, scale: float, k_scales: torch.Tensor | None = None,
                                  v_scales: torch.Tensor | None = None) -> torch.Tensor:
    """Attention for a batch whose sequences each bring at most ``max_query_len`` (small) new tokens."""
    num_tokens, num_heads, head_dim = query.shape
    num_seqs = block_tables.shape[0]
    block_size = key_cache.shape[2]
    dtype = _compute_dtype(query)
    if num_seqs == 1 and num_tokens == 1:
        return _single_token(query, key_cache, value_cache, block_tables, int(context_lens[0]), scale,
                             k_scales, v_scales)
    ctx = context_lens.long()
    qsl = query_start_loc.long()
    q_lens = qsl[1:] - qsl[:-1]
    n_blocks = int((ctx.max() + block_size - 1) // block_size)
    k = _gather(key_cache, k_scales, block_tables, n_blocks, dtype)  # [B, Hk, L, D]
    v = _gather(value_cache, v_scales, block_tables, n_blocks, dtype)
    # Slots past each context hold whatever memory held before (possibly NaN); zero them so masked
    # positions contribute exactly nothing.
    valid = (torch.arange(k.shape[2], device=query.device).unsqueeze(0) < ctx.unsqueeze(1)).view(num_seqs, 1, -1, 1)
    k = torch.where(valid, k, 0.0)
    v = torch.where(valid, v, 0.0)
    qmax = max_query_len
    if qmax == 1 and num_tokens == num_seqs:
        q = query.to(dtype).unsqueeze(2)  # [B, H, 1, D]
        rows = None
    else:
        seq_of_token = torch.repeat_interleave(torch.arange(num_seqs, device=query.device), q_lens)
        slot_of_token = torch.arange(num_tokens, device=query.device) - qsl[:-1].index_select(0, seq_of_token)
        padded = query.new_zeros((num_seqs, qmax, num_heads, head_dim), dtype=dtype)
        padded[seq_of_token, slot_of_token] = query.to(dtype)
        q = padded.transpose(1, 2)  # [B, H, Qmax, D]
        rows = (seq_of_token, slot_of_token)
    # Token j of a run of q_len ending at ctx sees positions < ctx - q_len + j + 1.
    k_pos = torch.arange(k.shape[2], device=query.device)
    limit = (ctx - q_lens).unsqueeze(1) + torch.arange(qmax, device=query.device).unsqueeze(0) + 1
    mask = (k_pos.view(1, 1, -1) < limit.unsqueeze(-1)).unsqueeze(1)  # [B, 1, Qmax, L], True = attend
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale,
                                         enable_gqa=num_heads != k.shape[1])  # [B, H, Qmax, D]
    out = out.transpose(1, 2)
    if rows is None:
        return out.reshape(num_tokens, num_heads, head_dim).to(query.dtype)
    return out[rows[0], rows[1]].to(query.dtype)


def paged_attention_chunks(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                           block_tables: torch.Tensor, context_lens: torch.Tensor, query_start_loc: torch.Tensor,
                           max_query_len: int, scale: float, k_scales: torch.Tensor | None = None,
                           v_scales: torch.Tensor | None = None) -> torch.Tensor:
    """Attention for variable-length chunks (prefill): one SDPA call per sequence."""
    num_heads = query.shape[1]
    block_size = key_cache.shape[2]
    dtype = _compute_dtype(query)
    out = torch.empty_like(query)
    starts = query_start_loc.tolist()
    for b, ctx_len in enumerate(context_lens.tolist()):
        q0, q1 = starts[b], starts[b + 1]
        q_len = q1 - q0
        if q_len == 0:
            continue
        n_blocks = (ctx_len + block_size - 1) // block_size
        table = block_tables[b:b + 1]
        k = _gather(key_cache, k_scales, table, n_blocks, dtype)[:, :, :ctx_len]
        v = _gather(value_cache, v_scales, table, n_blocks, dtype)[:, :, :ctx_len]
        q = query[q0:q1].to(dtype).transpose(0, 1).unsqueeze(0)  # [1, H, q_len, D]
        q_pos = torch.arange(ctx_len - q_len, ctx_len, device=query.device).unsqueeze(1)
        mask = torch.arange(ctx_len, device=query.device).unsqueeze(0) <= q_pos  # [q_len, L]
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale,
                                           enable_gqa=num_heads != k.shape[1])
        out[q0:q1] = o[0].transpose(0, 1).to(query.dtype)
    return out
