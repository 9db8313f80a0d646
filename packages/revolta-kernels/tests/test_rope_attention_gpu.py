"""revolta::rotary_cache_and_attention on the GPU against the two reference ops it stands for.

The fused kernel (csrc/decode_vec.cuh, ROPE) rotates the query and the new key from a fused projection's
strided views, writes the new key and value into the cache and attends, in one launch. The reference runs
rotary_and_cache then paged_attention in torch on a copy of the same cache. Outputs are poisoned first;
errors are relative L2 (||native - ref|| / ||ref||).
"""

from __future__ import annotations

import math

import pytest
import torch
from kernels_cases import NATIVE_GPU, cos_sin_table, make_attn_case, newest_slots, rel_err

import revolta_kernels
from revolta_kernels import ops, reference

if revolta_kernels.native_available():
    from revolta_kernels import native_attention, native_rope_attention

pytestmark = NATIVE_GPU

ATTN_TOL = 2e-3  # fp16 P/V operands with fp32 accumulation, as the other attention tests


def fused_problem(ctx, h, hkv, d, bs, seed, padded: int = 0):
    """A decode step: each sequence's newest position is ctx - 1; q/k/v are slices of one qkv tensor."""
    case = make_attn_case(ctx, [1] * len(ctx), h, hkv, d, bs, torch.float16, device="cuda", seed=seed)
    n = len(ctx)
    g = torch.Generator(device="cuda").manual_seed(seed)
    qkv = torch.randn((n, (h + 2 * hkv) * d + 24), generator=g, device="cuda").half()  # padded row stride
    q = qkv[:, : h * d].view(n, h, d)
    k = qkv[:, h * d : (h + hkv) * d].view(n, hkv, d)
    v = qkv[:, (h + hkv) * d : (h + 2 * hkv) * d].view(n, hkv, d)
    slots = newest_slots(case)
    if padded:
        slots[-padded:] = -1
    return case, q, k, v, case.context_lens.long() - 1, slots


def reference_step(case, q, k, v, positions, slots, cos_sin, neox):
    """The two reference ops on copies of the case's caches: (output, key cache, value cache)."""
    kc_ref, vc_ref = case.key_cache.clone(), case.value_cache.clone()
    q_rot = reference.rotary_and_cache(positions, q, k, v, cos_sin, neox, kc_ref, vc_ref, slots, None, None)
    want = reference.paged_attention(q_rot, kc_ref, vc_ref, case.block_tables, case.context_lens,
                                     case.query_start_loc, case.scale)
    return want, kc_ref, vc_ref


def run_both(case, q, k, v, positions, slots, cos_sin, neox):
    """(fused output, reference output, reference key cache, reference value cache); the fused op updates
    the case's own caches."""
    want, kc_ref, vc_ref = reference_step(case, q, k, v, positions, slots, cos_sin, neox)
    got = ops.rotary_cache_and_attention(positions, q, k, v, cos_sin, neox, case.key_cache, case.value_cache, slots,
                                         case.block_tables, case.context_lens, case.query_start_loc, 1, case.scale)
    return got, want, kc_ref, vc_ref


@pytest.fixture(params=[1, 2])
def vec_mode(request):
    """The fused kernel forced on (its default is only where PDL is off), with the vec decode kernel's
    default reach (1) and taking every case it can (2)."""
    old = native_attention.set_decode_vec(request.param)
    native_rope_attention.FUSED = True
    yield request.param
    native_rope_attention.FUSED = None
    native_attention.set_decode_vec(old)


CASES = [
    # ctx lens, heads, kv heads, head_dim, block size, rot_dim fraction, neox
    ([600], 32, 8, 128, 16, 1.0, True),  # Llama-3.1-8B batch 1
    ([1, 77, 1000, 4100], 32, 8, 128, 16, 1.0, True),  # ragged, one-token and multi-split contexts
    ([300, 65], 28, 4, 128, 16, 1.0, True),  # Qwen2.5-7B: GQA 7
    ([129, 900], 16, 16, 64, 32, 1.0, False),  # MHA, d64, gpt-j pairs, block size 32
    ([513], 16, 2, 256, 16, 0.25, True),  # d256, GQA 8, partial rotary (Qwen3.5-style)
    ([2000, 17, 5], 8, 1, 128, 8, 0.5, False),  # MQA, block size 8, partial gpt-j
]


@pytest.mark.parametrize("case_idx", range(len(CASES)))
def test_rotary_cache_and_attention(case_idx, vec_mode):
    ctx, h, hkv, d, bs, frac, neox = CASES[case_idx]
    rot_dim = int(d * frac)
    case, q, k, v, positions, slots = fused_problem(ctx, h, hkv, d, bs, seed=500 + case_idx)
    cos_sin = cos_sin_table(max(ctx) + 8, rot_dim, "cuda")
    torch.cuda.synchronize()
    got, want, kc_ref, vc_ref = run_both(case, q, k, v, positions, slots, cos_sin, neox)
    assert rel_err(got, want) < ATTN_TOL
    # The new keys and values landed in their slots (k rotated as the reference rotates it, up to one fp16
    # rounding of a differently ordered product), and nothing else in the cache changed.
    blk, off = slots // bs, slots % bs
    for cache, ref_cache in ((case.key_cache, kc_ref), (case.value_cache, vc_ref)):
        new, ref_new = cache[blk, :, off].float(), ref_cache[blk, :, off].float()
        assert (new - ref_new).abs().max() <= 2e-3 * ref_new.abs().max()
        cache[blk, :, off] = ref_cache[blk, :, off]
        assert torch.equal(cache, ref_cache)


def test_padding_slots_are_not_written(vec_mode):
    case, q, k, v, positions, slots = fused_problem([40, 300, 90], 32, 8, 128, 16, seed=7, padded=1)
    cos_sin = cos_sin_table(512, 128, "cuda")
    before = case.key_cache.clone()
    got, want, kc_ref, _ = run_both(case, q, k, v, positions, slots, cos_sin, True)
    # The padded token (slot -1) writes nothing and attends to what its newest cache row already holds, as
    # the two ops do: results agree and that row is unchanged.
    assert rel_err(got, want) < ATTN_TOL
    lens, bt = case.context_lens.long(), case.block_tables.long()
    last = bt[2, (lens[2] - 1) // 16] * 16 + (lens[2] - 1) % 16
    assert torch.equal(case.key_cache[last // 16, :, last % 16], before[last // 16, :, last % 16])


@pytest.mark.parametrize("ctx", [[600], [33, 1500, 4096]])
def test_graph_replays_with_new_tokens(ctx, vec_mode):
    """Captured once, replayed with fresh projections: each replay writes and attends to its own new key."""
    h, hkv, d, bs = 32, 8, 128, 16
    case, q, k, v, positions, slots = fused_problem(ctx, h, hkv, d, bs, seed=9)
    cos_sin = cos_sin_table(8192, d, "cuda")
    args = (positions, q, k, v, cos_sin, True, case.key_cache, case.value_cache, slots, case.block_tables,
            case.context_lens, case.query_start_loc, 1, case.scale)
    ops.rotary_cache_and_attention(*args)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = ops.rotary_cache_and_attention(*args)
    for step in range(3):
        q.normal_()
        k.normal_()
        v.normal_(std=2.0)
        want, _, _ = reference_step(case, q, k, v, positions, slots, cos_sin, True)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert rel_err(out, want) < ATTN_TOL, step
        assert not math.isnan(float(out.float().sum()))


def test_prefill_and_int8_fall_back_to_the_two_ops():
    """Query runs longer than one token and one-byte caches take the two-op path: same results."""
    case = make_attn_case([50, 200], [4, 9], 8, 2, 128, 16, torch.int8, device="cuda", seed=3)
    t = int(case.query_start_loc[-1])
    g = torch.Generator(device="cuda").manual_seed(3)
    q = torch.randn((t, 8, 128), generator=g, device="cuda").half()
    k = torch.randn((t, 2, 128), generator=g, device="cuda").half()
    v = torch.randn((t, 2, 128), generator=g, device="cuda").half()
    lens, bt = case.context_lens.long(), case.block_tables.long()
    seq_of = torch.repeat_interleave(torch.arange(2, device="cuda"), torch.tensor([4, 9], device="cuda"))
    last = torch.cat([torch.arange(lens[i] - n, lens[i], device="cuda") for i, n in enumerate([4, 9])])
    slots = bt[seq_of, last // 16] * 16 + last % 16
    cos_sin = cos_sin_table(256, 128, "cuda")
    kc_ref, vc_ref = case.key_cache.clone(), case.value_cache.clone()
    ks_ref, vs_ref = case.k_scales.clone(), case.v_scales.clone()
    q_rot = reference.rotary_and_cache(last, q, k, v, cos_sin, True, kc_ref, vc_ref, slots, ks_ref, vs_ref)
    want = reference.paged_attention(q_rot, kc_ref, vc_ref, case.block_tables, case.context_lens,
                                     case.query_start_loc, case.scale, ks_ref, vs_ref)
    got = ops.rotary_cache_and_attention(last, q, k, v, cos_sin, True, case.key_cache, case.value_cache, slots,
                                         case.block_tables, case.context_lens, case.query_start_loc, 9, case.scale,
                                         case.k_scales, case.v_scales)
    assert rel_err(got, want) < ATTN_TOL
