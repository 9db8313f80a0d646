"""Native mixture-of-experts decode kernels against the pure-torch references on the same GPU inputs: given
routing, routing in the kernel (bit-identical to the routing kernel's choice), the router GEMV (with the fused
residual add + RMSNorm), repeated expert ids. Fresh random inputs, NaN-poisoned freed allocator blocks, relative L2
error bounds as in test_gdn_gpu.py."""

from __future__ import annotations

import pytest
import torch
from kernels_cases import poison_allocator, rel_err
from moe_cases import DTYPES, TOL, cuda_gen, experts, routed_case

import revolta_kernels
from revolta_kernels import ops_moe
from revolta_kernels.reference import moe as ref_moe

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(not revolta_kernels.native_available(), reason=revolta_kernels.native_status()),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tokens", [1, 3, 17])
def test_fused_moe_given_routing(dtype, tokens):
    gen = cuda_gen(40 + tokens)
    e, h, inter, k = 64, 1024, 256, 8
    w13, w2 = experts(e, h, inter, dtype, gen)
    x = torch.randn(tokens, h, device="cuda", generator=gen).to(dtype)
    weights, ids = ref_moe.moe_topk_softmax(torch.randn(tokens, e, device="cuda", generator=gen), k, True)
    poison_allocator()
    got = ops_moe.fused_moe(x, w13, w2, weights.to(dtype), ids)
    want = ref_moe.fused_moe(x, w13, w2, weights.to(dtype), ids)
    assert rel_err(got, want) < TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("tokens", "e", "h", "inter", "k", "shared"), [
    (1, 256, 2048, 512, 8, "gated"),  # Qwen3.5-35B-A3B
    (4, 512, 2048, 512, 10, "gated"),  # Qwen3-Next-80B-A3B
    (2, 128, 2048, 768, 8, "none"),  # Qwen3-30B-A3B
    (5, 60, 520, 40, 4, "ungated"),
])
def test_moe_block_routes_in_kernel(dtype, tokens, e, h, inter, k, shared):
    gen = cuda_gen(50 + tokens + e)
    x, logits, w13, w2, args = routed_case(dtype, tokens, e, h, inter, shared, gen)
    poison_allocator()
    got = ops_moe.moe_block(x, logits, w13, w2, k, True, *args)
    want = ref_moe.moe_block(x, logits, w13, w2, k, True, *args)
    # the reference rounds the shared expert's intermediates to the storage type; the kernel keeps fp32
    assert rel_err(got, want) < 2 * TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("tokens", "e", "h"), [(1, 256, 2048), (3, 512, 2048), (8, 60, 520), (2, 128, 4096)])
def test_moe_router_logits(dtype, tokens, e, h):
    gen = cuda_gen(70 + tokens + e)
    x = torch.randn(tokens, 2 * h, device="cuda", generator=gen).to(dtype)[:, ::2]  # strided rows
    x = x.contiguous() if h % 16 else x[:, :h]
    w = (torch.randn(e, h, device="cuda", generator=gen) / h**0.5).to(dtype)
    poison_allocator()
    got = ops_moe.moe_router(x, w)
    assert got.shape == (tokens, e) and got.dtype == dtype
    assert rel_err(got, ref_moe.moe_router(x, w)) < TOL[dtype]


def test_moe_router_then_block_after_a_producer_kernel():
    """The PDL chain norm -> router -> up -> down: each kernel waits for the inputs its predecessor writes."""
    gen = cuda_gen(75)
    e, h, inter, k = 256, 2048, 512, 8
    w13, w2 = experts(e, h, inter, torch.float16, gen)
    wr = (torch.randn(e, h, device="cuda", generator=gen) / h**0.5).half()
    sw13 = (torch.randn(2 * inter, h, device="cuda", generator=gen) / h**0.5).half()
    sw2 = (torch.randn(h, inter, device="cuda", generator=gen) / inter**0.5).half()
    sgate = (torch.randn(1, h, device="cuda", generator=gen) / h**0.5).half()
    norm_w = torch.randn(h, device="cuda", generator=gen).half()
    for i in range(4):
        x = torch.randn(1, h, device="cuda", generator=gen).half()
        res = torch.randn(1, h, device="cuda", generator=gen).half()
        xs, _ = torch.ops.revolta.fused_add_rms_norm(x, res, norm_w, 1e-6, True)
        logits = ops_moe.moe_router(xs, wr)
        got = ops_moe.moe_block(xs, logits, w13, w2, k, True, sw13, sw2, sgate)
        torch.cuda.synchronize()
        want_logits = ref_moe.moe_router(xs, wr)
        assert rel_err(logits, want_logits) < TOL[torch.float16], f"round {i}"
        want = ref_moe.moe_block(xs, logits, w13, w2, k, True, sw13, sw2, sgate)
        assert rel_err(got, want) < 2 * TOL[torch.float16], f"round {i}"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tokens", [1, 2, 5, 32])
@pytest.mark.parametrize(("h", "e"), [(2048, 256), (520, 60), (4096, 512), (10240, 64)])
@pytest.mark.parametrize("zero_centered", [True, False])
def test_moe_router_norm_exact(dtype, tokens, h, e, zero_centered):
    """h bit-identical to the reference, the normed x bit-identical to the fused_add_rms_norm kernel (same
    summation order; within the storage rounding of the torch reference), logits = the router kernel's."""
    if h == 10240 and dtype != torch.float16:
        pytest.skip("the long-row (tail loop) case once")
    gen = cuda_gen(80 + tokens + h + int(zero_centered))
    x = torch.randn(tokens, h, device="cuda", generator=gen).to(dtype)
    res = (4 * torch.randn(tokens, h, device="cuda", generator=gen)).to(dtype)
    nw = (0.2 * torch.randn(h, device="cuda", generator=gen)).to(dtype)
    w = (torch.randn(e, h, device="cuda", generator=gen) / h**0.5).to(dtype)
    poison_allocator()
    logits, normed, hid = ops_moe.moe_router_norm(x, res, w, nw, 1e-6, zero_centered)
    torch.cuda.synchronize()
    want_n, want_h = torch.ops.revolta.fused_add_rms_norm(x, res, nw, 1e-6, zero_centered)
    ref_n, ref_h = ref_moe.ref_norm.fused_add_rms_norm(x, res, nw, 1e-6, zero_centered)
    assert torch.equal(hid, ref_h) and torch.equal(hid, want_h)
    assert torch.equal(normed, want_n)
    assert rel_err(normed, ref_n) < TOL[dtype]
    assert torch.equal(logits, ops_moe.moe_router(want_n, w))
    assert rel_err(logits, ref_moe.moe_router(ref_n, w)) < 2 * TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("tokens", "e", "h", "inter", "k", "shared"), [
    (1, 256, 2048, 512, 8, "gated"),  # Qwen3.5-35B-A3B
    (2, 256, 2048, 512, 8, "gated"),
    (5, 512, 2048, 512, 10, "gated"),  # Qwen3-Next-80B-A3B
    (32, 16, 1024, 256, 8, "gated"),  # 32 tokens over 16 experts: every expert repeated across tokens
    (2, 128, 2048, 768, 8, "none"),  # Qwen3-30B-A3B
    (5, 60, 520, 40, 4, "ungated"),
])
def test_moe_block_matches_reference(dtype, tokens, e, h, inter, k, shared):
    gen = cuda_gen(90 + tokens + e)
    x, logits, w13, w2, args = routed_case(dtype, tokens, e, h, inter, shared, gen)
    poison_allocator()
    got = ops_moe.moe_block(x, logits, w13, w2, k, True, *args)
    want = ref_moe.moe_block(x, logits, w13, w2, k, True, *args)
    assert rel_err(got, want) < 2 * TOL[dtype]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("tokens", [1, 2, 5, 32])
@pytest.mark.parametrize(("e", "k"), [(256, 8), (512, 10), (60, 4), (16, 8)])
def test_moe_block_routing_equals_the_routing_kernels(dtype, tokens, e, k):
    """Random (tie-prone: coarse) logits: the up kernel's own routing picks exactly the experts and weights of
    moe_topk_softmax (both rank candidates the same way; ties go to the lower id), and the rest of the block is the
    given-routing kernels' arithmetic, so the block is bit-identical to topk softmax + fused_moe (the reference may
    break exact ties differently, so it is checked on distinct logits in the other tests)."""
    gen = cuda_gen(110 + tokens + e)
    h, inter = 1024, 128
    w13, w2 = experts(e, h, inter, dtype, gen)
    x = torch.randn(tokens, h, device="cuda", generator=gen).to(dtype)
    logits = (torch.randn(tokens, e, device="cuda", generator=gen) * 8).round().div(8).to(dtype)
    poison_allocator()
    got = ops_moe.moe_block(x, logits, w13, w2, k, True, None, None, None)
    weights, ids = ops_moe.moe_topk_softmax(logits, k, True)
    poison_allocator()
    want = ops_moe.fused_moe(x, w13, w2, weights.to(dtype), ids)
    assert torch.equal(got, want)


def test_fused_moe_repeated_expert_ids():
    """Given routing with an expert chosen twice by one token and by every token."""
    gen = cuda_gen(95)
    e, h, inter, tokens = 8, 1024, 256, 5
    w13, w2 = experts(e, h, inter, torch.float16, gen)
    x = torch.randn(tokens, h, device="cuda", generator=gen).half()
    ids = torch.tensor([[3, 3, 1, 0]] * tokens, device="cuda")
    weights = torch.rand(tokens, 4, device="cuda", generator=gen).half()
    poison_allocator()
    got = ops_moe.fused_moe(x, w13, w2, weights, ids)
    assert rel_err(got, ref_moe.fused_moe(x, w13, w2, weights, ids)) < TOL[torch.float16]


@pytest.mark.parametrize("tokens", [1, 2, 5, 32])
def test_moe_router_norm_chain_matches_unfused(tokens):
    """The decode chain producer -> router_norm -> up -> down equals the unfused norm -> router -> up -> down
    bit for bit (same h, normed and logits, so the same routing and expert sums), eagerly and replayed in a
    CUDA graph on new inputs; and matches the reference within the storage rounding."""
    gen = cuda_gen(97 + tokens)
    e, h, inter, k = 256, 2048, 512, 8
    w13, w2 = experts(e, h, inter, torch.float16, gen)
    wr = (torch.randn(e, h, device="cuda", generator=gen) / h**0.5).half()
    sw13 = (torch.randn(2 * inter, h, device="cuda", generator=gen) / h**0.5).half()
    sw2 = (torch.randn(h, inter, device="cuda", generator=gen) / inter**0.5).half()
    sgate = (torch.randn(1, h, device="cuda", generator=gen) / h**0.5).half()
    nw = (0.2 * torch.randn(h, device="cuda", generator=gen)).half()
    sx = torch.zeros(tokens, h, device="cuda").half()
    sres = torch.zeros(tokens, h, device="cuda").half()

    def fused(x, res):
        y = x * 1.0  # a producer kernel right before (PDL: the router must wait for it)
        logits, normed, hid = ops_moe.moe_router_norm(y, res, wr, nw, 1e-6, True)
        return ops_moe.moe_block(normed, logits, w13, w2, k, True, sw13, sw2, sgate), hid

    def unfused(x, res):
        y = x * 1.0
        normed, hid = torch.ops.revolta.fused_add_rms_norm(y, res, nw, 1e-6, True)
        logits = ops_moe.moe_router(normed, wr)
        return ops_moe.moe_block(normed, logits, w13, w2, k, True, sw13, sw2, sgate), hid

    fused(sx, sres)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        g_out, g_h = fused(sx, sres)
    for i in range(3):
        x = torch.randn(tokens, h, device="cuda", generator=gen).half()
        res = (4 * torch.randn(tokens, h, device="cuda", generator=gen)).half()
        poison_allocator()
        got, got_h = fused(x, res)
        want, want_h = unfused(x, res)
        sx.copy_(x)
        sres.copy_(res)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(got_h, want_h) and torch.equal(got, want), f"round {i}"
        assert torch.equal(g_h, want_h) and torch.equal(g_out, want), f"graph round {i}"
        _, ref_h = ref_moe.ref_norm.fused_add_rms_norm(x, res, nw, 1e-6, True)
        assert torch.equal(got_h, ref_h)
        # the reference block on the kernel's normed x and logits (an ulp of the norm could flip a near-tie)
        logits, normed, _ = ops_moe.moe_router_norm(x, res, wr, nw, 1e-6, True)
        ref = ref_moe.moe_block(normed, logits, w13, w2, k, True, sw13, sw2, sgate)
        assert rel_err(got, ref) < 2 * TOL[torch.float16], f"round {i}"

