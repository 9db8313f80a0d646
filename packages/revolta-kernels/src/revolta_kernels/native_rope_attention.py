"""CUDA implementation of ``revolta::rotary_cache_and_attention``: rotary, the cache write and decode
attention in one launch (the ROPE variant of csrc/decode_vec.cuh) where that kernel applies, else the
native rotary_and_cache and paged attention one after the other.

When to fuse: with programmatic dependent launch (sm_90+) the separate rotary kernel's cost hides behind
the attention kernel's early start, and the fused kernel measured no faster on an H200 (Llama-3.1-8B batch
1: 8.22 vs 8.17 us per layer alone, 10.0 vs 9.7 us on a decode step's critical path). Without PDL (Volta
and every GPU before sm_90, or with PDL turned off) each kernel boundary costs a full launch, so the fused
kernel runs exactly there."""

from __future__ import annotations

import ctypes

import torch

from revolta_kernels import native_attention, native_ops, ops
from revolta_kernels.native import LIB, DecodeRope, check

# None: fuse where PDL is off (see above); True / False: always / never (tests and benchmarks of the fused kernel
# on a GPU with PDL).
FUSED: bool | None = None


def _fuse_now() -> bool:
    return FUSED if FUSED is not None else not LIB.revolta_pdl_on()


def _rows_ok(t: torch.Tensor) -> bool:
    """A [T, heads, D] view whose head rows start on 16-byte boundaries (the kernel's 16-byte loads)."""
    return (t.dim() == 3 and t.dtype == torch.float16 and t.stride(-1) == 1 and t.stride(0) % 8 == 0
            and t.stride(1) % 8 == 0 and t.data_ptr() % 16 == 0)


def _fusable(positions, query, key, value, cos_sin_cache, is_neox, key_cache, value_cache, slot_mapping,
             context_lens, max_query_len) -> bool:
    d = query.shape[-1] if query.dim() == 3 else 0
    rot_dim = cos_sin_cache.shape[-1]
    return (
        max_query_len == 1
        and _rows_ok(query) and _rows_ok(key) and _rows_ok(value)
        and key.shape == value.shape
        and key.shape[0] == query.shape[0] == context_lens.shape[0]
        and key_cache.dtype == torch.float16
        and native_attention.paged_cache_ok(d, query.shape[1], key_cache, value_cache)
        and key.shape[1:] == (key_cache.shape[1], key_cache.shape[3])
        and cos_sin_cache.dtype == torch.float32 and cos_sin_cache.device == query.device
        and 0 < rot_dim <= d and rot_dim % (16 if is_neox else 8) == 0
        and positions.device == query.device and slot_mapping.device == query.device
    )


def rotary_cache_and_attention(positions, query, key, value, cos_sin_cache, is_neox, key_cache, value_cache,
                               slot_mapping, block_tables, context_lens, query_start_loc, max_query_len, scale,
                               k_scales, v_scales):
    if query.shape[0] and _fuse_now() and _fusable(positions, query, key, value, cos_sin_cache, is_neox, key_cache, value_cache,
                                   slot_mapping, context_lens, max_query_len):
        out = torch.empty(query.shape, dtype=query.dtype, device=query.device)
        # The kernel reads the query through `rope`; AttnParams.q only needs to be a valid pointer. `_keep`
        # holds the tensors the params point into until the launch.
        p, _keep = native_attention.attn_params(out, out, key_cache, value_cache, block_tables, context_lens,
                                          query_start_loc, 1, scale, None, None, prefill=False)
        pos = positions.to(torch.int64).contiguous()
        slots = slot_mapping.to(torch.int64).contiguous()
        cs = cos_sin_cache.contiguous()
        rope = DecodeRope(
            query.data_ptr(), key.data_ptr(), value.data_ptr(),
            query.stride(0), query.stride(1), key.stride(0), key.stride(1), value.stride(0), value.stride(1),
            pos.data_ptr(), cs.data_ptr(), slots.data_ptr(), cs.shape[-1], int(is_neox),
        )
        taken = ctypes.c_int(0)
        check(LIB.revolta_rope_paged_decode(ctypes.byref(p), ctypes.byref(rope), query.shape[-1],
                                            context_lens.shape[0], ctypes.byref(taken),
                                            torch.cuda.current_stream(query.device).cuda_stream))
        if taken.value:
            return out
    q = native_ops.rotary_and_cache(positions, query, key, value, cos_sin_cache, is_neox, key_cache, value_cache,
                                    slot_mapping, k_scales, v_scales)
    return ops.paged_attention(q, key_cache, value_cache, block_tables, context_lens, query_start_loc,
                               max_query_len, scale, k_scales, v_scales)
