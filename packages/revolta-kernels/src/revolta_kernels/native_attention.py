"""CUDA paged attention (``revolta::paged_attention_decode`` / ``_prefill``) through ctypes: the kernel choice
(fragment-layout probe, variants, the vec decode kernel), the decode split plan and the kernels' AttnParams.

Inputs the kernels do not take (dtype, layout, head size) run the pure-torch reference instead.
"""

from __future__ import annotations

import ctypes
import math
from functools import cache

import torch

from revolta_kernels import ops
from revolta_kernels import reference as ref
from revolta_kernels.native import LIB, VOLTA_CHOICES, AttnParams, check
from revolta_kernels.native_ops import _sm_count, _split_counters, _stream, int8_scales_ok

_KV_KIND = {torch.float16: 0, torch.int8: 1, torch.float8_e4m3fn: 2, torch.float8_e5m2: 3}
_HEAD_DIMS = (64, 128, 256)
_DECODE_TILE = 64  # keys per tile of the decode kernel (split sizes are multiples of it)


_FRAG_OK: dict[int, bool] = {}


def _mma_layout(index: int) -> bool:
    """Whether the fragment-layout ("mma") attention kernels run on device ``index``.

    Probed once per device (sm_80 and later pass; Volta does not and keeps the generic kernels). Never with the
    Volta library or in Volta mode (``REVOLTA_EMULATE_ARCH``), where the choice is a V100's even though a newer
    GPU would pass. The probe allocates and synchronises, so it is skipped during CUDA-graph capture (the generic
    kernels serve a capture that comes before any eager call).
    """
    if VOLTA_CHOICES:
        return False
    ok = _FRAG_OK.get(index)
    if ok is None:
        if torch.cuda.is_current_stream_capturing():
            return False
        ok = mma_layout_maps(index)[0]
        _FRAG_OK[index] = ok
    return ok


def mma_layout_maps(index: int = 0) -> tuple[bool, list[int]]:
    """Run the fragment-layout probe on device ``index`` and return (ok, what each element held).

    The list has 4 x 32 x 16 entries (accumulator, matrix_a, matrix_b col-major, matrix_b row-major; lane;
    element), each row * 16 + col (or k * 16 + n), -1 past the fragment's size; for diagnostics.
    """
    ok = ctypes.c_int(0)
    maps = (ctypes.c_int * 2048)()
    with torch.cuda.device(index):
        check(LIB.revolta_mma_layout_probe(ctypes.byref(ok), maps))
    return bool(ok.value), list(maps)


def set_attention_variant(decode: int = 0, prefill: int = 0) -> None:
    """Choose the attention kernels: 0 = best for each case (default), 1 = generic kernels only, 2+ =
    alternative configurations of the mma kernels for tuning benchmarks (see csrc/attention_*.cu). 2+
    skip the fragment-layout probe, so they give wrong results on GPUs it refuses (Volta)."""
    check(LIB.revolta_set_attention_variant(decode, prefill))
    _blocks_per_sm.cache_clear()


def set_decode_vec(mode: int) -> int:
    """Where the vec fp16 decode kernel runs (csrc/decode_vec.cuh): 0 never, 1 small batches (the
    default), 2 every one-token decode it can take. Returns the previous mode."""
    old = LIB.revolta_set_decode_vec(mode)
    if old < 0:
        raise ValueError(f"decode vec mode must be 0, 1 or 2, not {mode}")
    return old


# Benchmarks may force the decode split plan (None = the occupancy model decides): SPLIT_OVERRIDE even
# splits of each context, or CHUNK_OVERRIDE fixed chunks of that many keys (a multiple of 64).
SPLIT_OVERRIDE: int | None = None
CHUNK_OVERRIDE: int | None = None
# Per-block cost of a split beyond its keys (prologue, pipeline fill, partial write and merge), in keys.
_SPLIT_OVERHEAD_KEYS = 32
_MAX_SPLITS = 256


@cache
def _blocks_per_sm(head_dim: int, kv_kind: int, prefill: bool, rows: int, mma: bool = False) -> int:
    # `mma` is part of the cache key only: the library answers for the kernel it would launch now.
    n = ctypes.c_int(0)
    check(LIB.revolta_attention_blocks_per_sm(head_dim, kv_kind, int(prefill), rows, ctypes.byref(n)))
    return max(1, n.value)


@cache
def _splits(base: int, max_ctx: int, slots: int) -> tuple[int, int]:
    """The decode grid's context splits: (grid.z, split_tokens), see split_len in csrc/attention.cuh.

    ``base`` blocks exist without splitting and ``slots`` run at once; ``max_ctx`` is the block table's
    width, all the host knows under CUDA-graph capture.

    - Fewer blocks than slots (small batches): split_tokens 0, the kernel cuts each row tile's actual
      context evenly into grid.z parts of whole 64-key units (fewer for short contexts; the rest exit at
      once). Modelled time: waves x (keys per split + a fixed per-block cost); the cheapest count wins, ties
      going to fewer splits.
    - Several waves anyway (large batches): fixed chunks of split_tokens keys. The blocks of the first
      chunks are scheduled before the short tails, which then fill the last wave; even splits leave it
      ragged (measured on the H200: 64 x 512..767 keys, 32/8 heads, fp16: 71 us even vs 66 us chunked).
      Modelled time: waves x chunk, as before the even plan existed.
    """
    if base >= slots:
        best = (float("inf"), 1, 0)
        for s in range(1, max(1, min(_MAX_SPLITS, max_ctx // (4 * _DECODE_TILE))) + 1):
            chunk = math.ceil(math.ceil(max_ctx / s) / _DECODE_TILE) * _DECODE_TILE
            n = math.ceil(max_ctx / chunk)
            cost = math.ceil(base * n / slots) * chunk
            if cost < best[0]:
                best = (cost, n, chunk if n > 1 else 0)
        return best[1], best[2]
    best = (float("inf"), 1)
    for s in range(1, max(1, min(_MAX_SPLITS, math.ceil(max_ctx / _DECODE_TILE))) + 1):
        keys = math.ceil(math.ceil(max_ctx / s) / _DECODE_TILE) * _DECODE_TILE
        n = math.ceil(max_ctx / keys)  # splits that get keys
        cost = math.ceil(base * n / slots) * (keys + (_SPLIT_OVERHEAD_KEYS if n > 1 else 0))
        if cost < best[0]:
            best = (cost, n)
    return best[1], 0


def paged_cache_ok(head_dim: int, num_heads: int, key_cache: torch.Tensor, value_cache: torch.Tensor) -> bool:
    """The paged K/V caches the attention kernels take for queries of ``num_heads`` x ``head_dim``: one dtype,
    contiguous, a supported head_dim, whole GQA groups, a power-of-two block size."""
    return (
        value_cache.dtype == key_cache.dtype
        and head_dim in _HEAD_DIMS
        and key_cache.shape[-1] == head_dim
        and key_cache.is_contiguous()
        and value_cache.is_contiguous()
        and num_heads % key_cache.shape[1] == 0
        and key_cache.shape[2] & (key_cache.shape[2] - 1) == 0
    )


def attn_params(q, out, key_cache, value_cache, block_tables, context_lens, query_start_loc, max_query_len, scale,
                k_scales, v_scales, prefill: bool) -> tuple[AttnParams, tuple]:
    """The kernels' AttnParams for checked inputs (q [T, H, D] as the kernel reads it, out [T, H, D]), with the
    decode split plan, and the tensors it points into that the caller keeps alive until the launch."""
    kind = _KV_KIND[key_cache.dtype]
    d = q.shape[-1]
    dev = q.device.index if q.device.index is not None else torch.cuda.current_device()
    mma = _mma_layout(dev)
    num_seqs = context_lens.shape[0]
    bt = block_tables.to(torch.int32).contiguous()
    cl = context_lens.to(torch.int32).contiguous()
    qsl = query_start_loc.to(torch.int32).contiguous()
    t, h, _ = q.shape
    hkv, bs = key_cache.shape[1], key_cache.shape[2]
    splits, split_tokens, counters = 1, 0, None
    if not prefill:
        row_tiles = math.ceil(max_query_len * (h // hkv) / 16)
        rows = min(max_query_len * (h // hkv), 16)
        slots = _sm_count(dev) * _blocks_per_sm(d, kind, False, rows, mma)
        base = num_seqs * hkv * row_tiles
        if SPLIT_OVERRIDE is not None:
            splits, split_tokens = max(1, SPLIT_OVERRIDE), 0
        elif CHUNK_OVERRIDE is not None:
            split_tokens = CHUNK_OVERRIDE
            splits = math.ceil(bt.shape[1] * bs / split_tokens)
        else:
            splits, split_tokens = _splits(base, bt.shape[1] * bs, slots)
        if splits > 1:  # one counter per block of a split: row tiles of 8 rows at most
            counters = _split_counters(q.device, num_seqs * hkv * math.ceil(max_query_len * (h // hkv) / 8))
    part_o = part_ml = None
    if splits > 1:
        part_o = torch.empty((splits, t, h, d), dtype=torch.float32, device=q.device)
        part_ml = torch.empty((splits, t, h, 2), dtype=torch.float32, device=q.device)
    int8 = kind == 1
    p = AttnParams(
        q.data_ptr(),
        out.data_ptr(),
        key_cache.data_ptr(),
        value_cache.data_ptr(),
        k_scales.data_ptr() if int8 else None,
        v_scales.data_ptr() if int8 else None,
        bt.data_ptr(),
        cl.data_ptr(),
        qsl.data_ptr(),
        part_o.data_ptr() if part_o is not None else None,
        part_ml.data_ptr() if part_ml is not None else None,
        t,
        h,
        hkv,
        bs,
        bt.shape[1],
        splits,
        scale * math.log2(math.e),
        bs.bit_length() - 1,
        counters.data_ptr() if counters is not None else None,
        split_tokens if splits > 1 else 0,
    )
    return p, (bt, cl, qsl, part_o, part_ml, counters)


def _attention(prefill: bool):
    def impl(query, key_cache, value_cache, block_tables, context_lens, query_start_loc, max_query_len, scale,
             k_scales=None, v_scales=None):
        kind = _KV_KIND.get(key_cache.dtype)
        ok = (
            query.dtype == torch.float16
            and kind is not None
            and query.dim() == 3
            and paged_cache_ok(query.shape[-1], query.shape[1], key_cache, value_cache)
            and (kind != 1 or int8_scales_ok(k_scales, v_scales))
        )
        if not ok:
            return ref.paged_attention(query, key_cache, value_cache, block_tables, context_lens, query_start_loc,
                                       scale, k_scales, v_scales)
        q = query.contiguous()
        out = torch.empty_like(q)
        if context_lens.shape[0] == 0 or q.shape[0] == 0:
            return out
        p, _keep = attn_params(q, out, key_cache, value_cache, block_tables, context_lens, query_start_loc,
                               max_query_len, scale, k_scales, v_scales, prefill)
        check(LIB.revolta_paged_attention(p, q.shape[-1], _KV_KIND[key_cache.dtype], int(prefill),
                                          context_lens.shape[0], max_query_len, _stream(q)))
        return out

    return impl


def register() -> None:
    """Register the CUDA paged attention kernels (called once when the library loaded)."""
    ops.paged_attention_decode.register_kernel("cuda")(_attention(prefill=False))
    ops.paged_attention_prefill.register_kernel("cuda")(_attention(prefill=True))
