"""Native paged attention (decode, prefill, the mma and vec variants, split plans, CUDA graphs) against the
pure-torch reference on the same GPU inputs.

Every check draws fresh random inputs, poisons the memory the output will land in (NaN-filled allocator
blocks, NaN-filled caches), and states its error bound: relative L2 error ||native - ref|| / ||ref||.
"""

from __future__ import annotations

import pytest
import torch
from kernels_cases import FP8, NATIVE_GPU, make_attn_case, newest_slots, poison_allocator, rel_err

import revolta_kernels
from revolta_kernels import ops, reference

if revolta_kernels.native_available():
    from revolta_kernels import native_attention

pytestmark = NATIVE_GPU

ATTN_TOL = 2e-3  # fp16 P/V operands with fp32 accumulation


@pytest.fixture(params=["auto", "generic", "mma-alt", "vec"])
def attn_variant(request):
    """Run an attention test with the default kernel choice (mma kernels where the GPU allows, the vec
    fp16 decode kernel for small batches), with the generic kernels forced, with alternative frag
    configurations (decode: one stage, three blocks per SM; prefill: 4 warps with two buffers), and with
    the vec decode kernel taking every fp16 one-token decode (any batch), so every path the defaults may
    take stays correct."""
    if request.param == "mma-alt" and not native_attention._mma_layout(torch.cuda.current_device()):
        pytest.skip("mma kernels do not run on this GPU")
    decode, prefill = {"auto": (0, 0), "generic": (1, 1), "mma-alt": (4, 2), "vec": (0, 0)}[request.param]
    native_attention.set_attention_variant(decode, prefill)
    old_vec = native_attention.set_decode_vec(2 if request.param == "vec" else 1)
    yield request.param
    native_attention.set_attention_variant(0, 0)
    native_attention.set_decode_vec(old_vec)


def test_mma_layout_probe():
    ok, maps = native_attention.mma_layout_maps(torch.cuda.current_device())
    assert len(maps) == 2048
    if revolta_kernels.effective_arch(torch.cuda.get_device_capability()) >= 80:  # not in Volta mode
        assert ok, "sm_80+ WMMA fragments should have the mma.m16n8k16 layout the mma kernels use"


DECODE_CASES = [
    # ctx lens, q lens, heads, kv heads, head_dim, block_size
    ([1, 17, 300, 64], [1, 1, 1, 1], 8, 8, 128, 16),
    ([33, 700, 1500], [1, 1, 1], 32, 8, 128, 16),
    ([5000], [1], 32, 8, 128, 16),  # long context: split-K merged in the kernel
    ([9, 200, 3000], [3, 8, 5], 16, 2, 64, 32),  # speculative verification, causal among new tokens
    ([120, 2048], [2, 4], 8, 1, 256, 16),  # MQA, head_dim 256
    ([77, 513], [8, 1], 32, 1, 128, 32),  # MQA with 8 query tokens: several row tiles
    ([700, 64, 3000], [2, 1, 2], 8, 2, 256, 16),  # 8 packed rows, head_dim 256
    ([50, 301, 1000], [1, 2, 1], 8, 2, 128, 8),  # block size 8: generic kernel even where frag runs
    ([4097, 33], [1, 1], 32, 8, 128, 16),  # the benchmark's shape, ragged lengths
    ([1, 130, 900], [1, 1, 1], 32, 4, 64, 16),  # GQA 8 at d64, one token each (vec kernel)
    ([257, 2000], [1, 1], 16, 8, 128, 16),  # GQA 2 at d128
]


@pytest.mark.parametrize("kv_dtype", [torch.float16, torch.int8, *FP8])
@pytest.mark.parametrize("case_idx", range(len(DECODE_CASES)))
def test_paged_attention_decode(kv_dtype, case_idx, attn_variant):
    ctx, ql, h, hkv, d, bs = DECODE_CASES[case_idx]
    case = make_attn_case(ctx, ql, h, hkv, d, bs, kv_dtype, device="cuda", seed=100 + case_idx)
    want = case.reference()
    poison_allocator()
    got = ops.paged_attention_decode(*case.args())
    assert rel_err(got, want) < ATTN_TOL


PREFILL_CASES = [
    ([100], [100], 8, 8, 128, 16),  # whole prompt
    ([300, 70], [100, 70], 32, 8, 128, 16),  # chunk after a cached prefix, plus a fresh prompt
    ([1000, 5, 513], [257, 5, 13], 16, 2, 64, 32),
    ([640], [200], 8, 4, 256, 16),
    ([129, 64], [129, 30], 12, 1, 128, 32),  # MQA
]


@pytest.mark.parametrize("kv_dtype", [torch.float16, torch.int8, torch.float8_e4m3fn])
@pytest.mark.parametrize("case_idx", range(len(PREFILL_CASES)))
def test_paged_attention_prefill(kv_dtype, case_idx, attn_variant):
    if attn_variant == "vec":
        pytest.skip("the vec kernel is decode-only: this variant would rerun the auto case")
    ctx, ql, h, hkv, d, bs = PREFILL_CASES[case_idx]
    case = make_attn_case(ctx, ql, h, hkv, d, bs, kv_dtype, device="cuda", seed=200 + case_idx)
    want = case.reference()
    poison_allocator()
    got = ops.paged_attention_prefill(*case.args())
    assert rel_err(got, want) < ATTN_TOL


# fp16/d128 prefill tuning configurations (attention_prefill.cu, variants 3+; the benchmark sweep times
# them): each must stay correct wherever the mma kernels run, so that any of them can become the default.
PREFILL_FRAG_VARIANTS = list(range(3, 23))
PREFILL_D128_CASES = [0, 1, 4, *range(len(PREFILL_CASES), len(PREFILL_CASES) + 2)]
PREFILL_EXTRA = [
    ([1500], [1500], 32, 8, 128, 16),  # several key tiles of every size, ragged last tile
    ([900, 333], [611, 333], 8, 2, 128, 16),  # cached prefix + chunk, two sequences
]


@pytest.mark.parametrize("variant", PREFILL_FRAG_VARIANTS)
@pytest.mark.parametrize("case_idx", PREFILL_D128_CASES)
def test_paged_attention_prefill_mma_variants(case_idx, variant):
    if not native_attention._mma_layout(torch.cuda.current_device()):
        pytest.skip("mma kernels do not run on this GPU")
    ctx, ql, h, hkv, d, bs = (PREFILL_CASES + PREFILL_EXTRA)[case_idx]
    case = make_attn_case(ctx, ql, h, hkv, d, bs, torch.float16, device="cuda", seed=300 + case_idx)
    want = case.reference()  # an fp16 cache: no scales
    poison_allocator()
    native_attention.set_attention_variant(0, variant)
    try:
        got = ops.paged_attention_prefill(*case.args())
    finally:
        native_attention.set_attention_variant(0, 0)
    assert rel_err(got, want) < ATTN_TOL


def test_unsupported_cases_fall_back_to_reference():
    # bf16 queries (no bf16 tensor-core math on sm_70) and a block size that is not a power of two
    for q_dtype, bs in ((torch.bfloat16, 16), (torch.float16, 24)):
        case = make_attn_case([40, 100], [1, 3], 4, 2, 64, bs, torch.float16, device="cuda", q_dtype=q_dtype)
        got = ops.paged_attention_decode(*case.args())
        want = case.reference()  # an fp16 cache: no scales
        assert got.dtype == q_dtype and torch.equal(got, want)


@pytest.mark.parametrize("kv_dtype", [torch.float16, torch.int8])
@pytest.mark.parametrize("ctx", [[300, 41, 1000], [20000]])
def test_decode_cuda_graph_replay(ctx, kv_dtype):
    case = make_attn_case(ctx, [1] * len(ctx), 32, 8, 128, 16, kv_dtype, device="cuda", seed=7)
    args = list(case.args())
    ops.paged_attention_decode(*args)  # warm up outside capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = ops.paged_attention_decode(*args)
    for _ in range(2):
        case.query.copy_(torch.randn_like(case.query))
        static_out.fill_(float("nan"))
        graph.replay()
        eager = ops.paged_attention_decode(*args)
        torch.cuda.synchronize()
        assert torch.equal(static_out, eager)
        want = case.reference()
        assert rel_err(static_out, want) < ATTN_TOL


@pytest.mark.parametrize("vec", [1, 2])
@pytest.mark.parametrize("ctx", [[600], [1, 77, 1000], [4096]])
def test_decode_reads_the_key_written_just_before(ctx, vec):
    """The cache write of the new token and the decode right after it, in one graph (PDL between them on
    sm_90): the vec kernel reads older keys before its PDL wait, the newest one after it, so every
    replay's fresh newest key must be in the result."""
    case = make_attn_case(ctx, [1] * len(ctx), 32, 8, 128, 16, torch.float16, device="cuda", seed=21)
    n, hkv, d = len(ctx), 8, 128
    slots = newest_slots(case)
    new_k = torch.empty((n, hkv, d), dtype=torch.float16, device="cuda")
    new_v = torch.empty_like(new_k)
    old = native_attention.set_decode_vec(vec)
    try:
        args = list(case.args())
        ops.reshape_and_cache(new_k.normal_(), new_v.normal_(), case.key_cache, case.value_cache, slots)
        ops.paged_attention_decode(*args)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            ops.reshape_and_cache(new_k, new_v, case.key_cache, case.value_cache, slots)
            static_out = ops.paged_attention_decode(*args)
        for _ in range(3):
            new_k.normal_()
            new_v.normal_(std=3.0)
            static_out.fill_(float("nan"))
            graph.replay()
            torch.cuda.synchronize()
            want = reference.paged_attention(
                case.query, case.key_cache, case.value_cache, case.block_tables, case.context_lens,
                case.query_start_loc, case.scale, None, None,
            )
            assert rel_err(static_out, want) < ATTN_TOL
            last = case.key_cache[slots // 16, :, slots % 16]
            assert torch.equal(last, new_k)
    finally:
        native_attention.set_decode_vec(old)


# Decode split plan (csrc/attention.cuh split_len / merge_splits): the kernel cuts each row tile's ACTUAL
# context into grid.z parts (or fixed chunks) and merges them in the same launch. Forced split counts from 1
# to far more than the context has 64-key units, fixed chunks, block tables much wider than the contexts (a
# CUDA-graph bucket), GQA groups 1..8, 1..8 query tokens, d64/d128/d256.
SPLIT_CASES = [
    # ctx lens, q lens, heads, kv heads, head_dim, block_size, extra block-table columns
    ([600], [1], 32, 8, 128, 16, 40),  # Llama-8B batch 1 inside a 1K-token bucket
    ([512, 767, 640, 530], [1, 1, 1, 1], 32, 8, 128, 16, 30),  # batch-64 style ragged contexts
    ([600, 90], [1, 1], 16, 2, 256, 16, 20),  # Qwen3.5 attention layers: d256, GQA 8
    ([300, 1000, 65], [8, 3, 1], 8, 8, 64, 16, 8),  # MHA, several query tokens, d64
    ([2000, 17], [5, 2], 32, 4, 128, 32, 4),  # GQA 8 x 5 tokens: three 16-row tiles
]


@pytest.mark.parametrize("kv_dtype", [torch.float16, torch.int8])
@pytest.mark.parametrize(
    "plan", [("even", 1), ("even", 3), ("even", 16), ("even", 64), ("chunk", 64), ("chunk", 512)]
)
@pytest.mark.parametrize("case_idx", range(len(SPLIT_CASES)))
def test_decode_splits(case_idx, plan, kv_dtype, attn_variant):
    ctx, ql, h, hkv, d, bs, extra = SPLIT_CASES[case_idx]
    case = make_attn_case(ctx, ql, h, hkv, d, bs, kv_dtype, device="cuda", seed=300 + case_idx)
    wide = torch.zeros((len(ctx), case.block_tables.shape[1] + extra), dtype=torch.int32, device="cuda")
    wide[:, : case.block_tables.shape[1]] = case.block_tables
    case.block_tables = wide
    want = case.reference()
    poison_allocator()
    if plan[0] == "even":
        native_attention.SPLIT_OVERRIDE = plan[1]
    else:
        native_attention.CHUNK_OVERRIDE = plan[1]
    try:
        got = ops.paged_attention_decode(*case.args())
        again = ops.paged_attention_decode(*case.args())  # the counters re-armed themselves
    finally:
        native_attention.SPLIT_OVERRIDE = native_attention.CHUNK_OVERRIDE = None
    assert rel_err(got, want) < ATTN_TOL
    assert torch.equal(got, again)


@pytest.mark.parametrize("kv_dtype", [torch.float16, torch.int8])
def test_decode_graph_replay_growing_contexts(kv_dtype):
    """A graph captured once (wide block table, default split plan) stays right as the contexts change."""
    case = make_attn_case([900, 40, 3000], [1, 1, 1], 32, 8, 128, 16, kv_dtype, device="cuda", seed=11)
    args = list(case.args())
    lens = case.context_lens
    lens.copy_(torch.tensor([100, 20, 700], dtype=torch.int32))
    ops.paged_attention_decode(*args)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = ops.paged_attention_decode(*args)
    for new in ([100, 20, 700], [640, 33, 1500], [900, 40, 3000], [1, 1, 1]):
        lens.copy_(torch.tensor(new, dtype=torch.int32))
        static_out.fill_(float("nan"))
        graph.replay()
        want = reference.paged_attention(
            case.query, case.key_cache, case.value_cache, case.block_tables, lens,
            case.query_start_loc, case.scale, case.k_scales, case.v_scales,
        )
        assert rel_err(static_out, want) < ATTN_TOL, new


@pytest.mark.parametrize("kv_dtype", [torch.float16, torch.int8])
def test_decode_256k_context(kv_dtype):
    """Batch 1 at 256K keys (many splits of thousands of keys each), cache built on the GPU."""
    ctx, h, hkv, d, bs = 262144, 32, 8, 128, 16
    nb = ctx // bs + 2
    torch.manual_seed(5)
    if kv_dtype == torch.int8:
        kc = torch.randint(-127, 128, (nb, hkv, bs, d), device="cuda", dtype=torch.int8)
        vc = torch.randint(-127, 128, (nb, hkv, bs, d), device="cuda", dtype=torch.int8)
        ks = torch.rand((nb, hkv, bs), device="cuda") * 0.02 + 0.002
        vs = torch.rand((nb, hkv, bs), device="cuda") * 0.02 + 0.002
    else:
        kc = torch.randn((nb, hkv, bs, d), device="cuda", dtype=torch.float16)
        vc = torch.randn((nb, hkv, bs, d), device="cuda", dtype=torch.float16)
        ks = vs = None
    table = torch.randperm(nb, device="cuda")[: ctx // bs].to(torch.int32).view(1, -1)
    q = torch.randn(1, h, d, device="cuda", dtype=torch.float16)
    lens = torch.tensor([ctx], dtype=torch.int32, device="cuda")
    qsl = torch.tensor([0, 1], dtype=torch.int32, device="cuda")
    want = reference.paged_attention(q, kc, vc, table, lens, qsl, d**-0.5, ks, vs)
    poison_allocator()
    got = ops.paged_attention_decode(q, kc, vc, table, lens, qsl, 1, d**-0.5, ks, vs)
    assert rel_err(got, want) < ATTN_TOL


@pytest.mark.parametrize("vec", [0, 2])
def test_decode_merge_of_many_splits(vec):
    """625 fixed 64-key chunks of one 40K-key context (csrc/decode_merge.cuh): the generic kernel's shared memory
    holds every split's weight (the two-pass merge), the vec kernel's 4.4 KB for one head of d64 does not (the
    one-pass merge it falls back to)."""
    case = make_attn_case([40000], [1], 1, 1, 64, 16, torch.float16, device="cuda", seed=21)
    want = case.reference()
    poison_allocator()
    old = native_attention.set_decode_vec(vec)
    native_attention.CHUNK_OVERRIDE = 64
    try:
        got = ops.paged_attention_decode(*case.args())
        again = ops.paged_attention_decode(*case.args())
    finally:
        native_attention.CHUNK_OVERRIDE = None
        native_attention.set_decode_vec(old)
    assert rel_err(got, want) < ATTN_TOL
    assert torch.equal(got, again)
