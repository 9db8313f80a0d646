"""The router kernel that also routes (revolta::moe_router_norm_topk: the residual add + norm, the router GEMV,
and the softmax top-k by the grid's last block) against the two launches it replaces (moe_router_norm, then
moe_topk_softmax) bit for bit, and against the pure-torch reference. Fresh random inputs, NaN-poisoned freed
allocator blocks; ties, repeated launches (the arrival counter must be left zero), a producer kernel right before
(PDL) and CUDA graph replay on new inputs."""

from __future__ import annotations

import pytest
import torch
from hybrid_cases import DTYPES, cuda_gen
from kernels_cases import poison_allocator, rel_err

import revolta_kernels
from revolta_kernels import ops_hybrid
from revolta_kernels.reference import moe as ref_moe

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(not revolta_kernels.native_available(), reason=revolta_kernels.native_status()),
]


def _case(dtype, tokens: int, h: int, e: int, gen: torch.Generator, dup: int = 0):
    """Block input, residual, router weight and norm weight; ``dup`` > 0 copies router row 0 into rows
    1..dup so those experts' logits tie exactly (the lower id must win)."""
    x = torch.randn(tokens, h, device="cuda", generator=gen).to(dtype)
    res = (4 * torch.randn(tokens, h, device="cuda", generator=gen)).to(dtype)
    w = (torch.randn(e, h, device="cuda", generator=gen) / h**0.5).to(dtype)
    if dup:
        w[1:dup + 1] = w[0]
    nw = (0.2 * torch.randn(h, device="cuda", generator=gen)).to(dtype)
    return x, res, w, nw


def _two_launches(x, res, w, nw, k, renormalize, zero_centered=True):
    logits, normed, h = ops_hybrid.moe_router_norm(x, res, w, nw, 1e-6, zero_centered)
    weights, ids = ops_hybrid.moe_topk_softmax(logits, k, renormalize)
    return weights, ids, normed, h, logits


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tokens", [1, 2, 5, 32])
@pytest.mark.parametrize(("h", "e", "k", "renormalize"), [
    (2048, 256, 8, True),  # Qwen3.5-35B-A3B
    (2048, 128, 8, True),  # Qwen3-30B-A3B
    (2048, 512, 10, True),  # Qwen3-Next-80B-A3B
    (520, 60, 4, False),  # not renormalised
    (4096, 16, 16, True),  # every expert's rank counted, top_k at its limit
    (1024, 7, 1, False),  # one block, E odd
])
def test_router_topk_equals_router_then_topk(dtype, tokens, h, e, k, renormalize):
    gen = cuda_gen(300 + tokens + e + k)
    x, res, w, nw = _case(dtype, tokens, h, e, gen, dup=3 if e >= 8 else 0)
    poison_allocator()
    weights, ids, normed, hid = ops_hybrid.moe_router_norm_topk(x, res, w, nw, 1e-6, True, k, renormalize)
    want_w, want_ids, want_n, want_h, logits = _two_launches(x, res, w, nw, k, renormalize)
    torch.cuda.synchronize()
    assert ids.dtype == torch.int64 and weights.dtype == torch.float32 and ids.shape == (tokens, k)
    assert torch.equal(hid, want_h) and torch.equal(normed, want_n)
    assert torch.equal(ids, want_ids) and torch.equal(weights, want_w)
    # the reference on the kernel's logits (its own logits may differ by an ulp and flip a near-tie); it may break
    # the exact ties of the copied rows otherwise, so the chosen logits are compared, not the ids
    ref_w, ref_ids = ref_moe.moe_topk_softmax(logits, k, renormalize)
    assert torch.equal(logits.gather(1, ids), logits.gather(1, ref_ids))
    assert rel_err(weights, ref_w) < 1e-5


def test_router_topk_ties_go_to_the_lower_expert():
    """Experts 0..4 share one router row: equal logits, so the kernel picks them in id order."""
    gen = cuda_gen(331)
    x, res, w, nw = _case(torch.float16, 3, 2048, 256, gen)
    _, normed, _ = ops_hybrid.moe_router_norm(x, res, w, nw, 1e-6, False)
    w[:5] = (normed[0].float() / normed[0].float().norm()).half()  # token 0's largest logit, five times
    weights, ids, *_ = ops_hybrid.moe_router_norm_topk(x, res, w, nw, 1e-6, False, 8, True)
    want_w, want_ids, *_ = _two_launches(x, res, w, nw, 8, True, zero_centered=False)
    assert torch.equal(ids, want_ids) and torch.equal(weights, want_w)
    assert ids[0, :5].tolist() == [0, 1, 2, 3, 4]


def test_router_topk_repeated_launches_after_a_producer_and_in_a_graph():
    """A producer kernel right before (PDL: the router waits for it), many launches in a row (each must leave
    the arrival counter zero for the next), and graph replays on new inputs: always the two launches' result."""
    gen = cuda_gen(340)
    h, e, k = 2048, 256, 8
    _, _, w, nw = _case(torch.float16, 1, h, e, gen)
    sx = torch.zeros(1, h, device="cuda").half()
    sres = torch.zeros(1, h, device="cuda").half()

    def fused(x, res):
        return ops_hybrid.moe_router_norm_topk(x * 1.0, res, w, nw, 1e-6, True, k, True)

    def chained(x, res):  # four layers' routing back to back, as a decode step runs them
        outs = [fused(x, res)]
        for _ in range(3):
            outs.append(fused(outs[-1][2], outs[-1][3]))
        return outs

    chained(sx, sres)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        g_outs = chained(sx, sres)
    for i in range(3):
        x = torch.randn(1, h, device="cuda", generator=gen).half()
        res = (4 * torch.randn(1, h, device="cuda", generator=gen)).half()
        poison_allocator()
        got = chained(x, res)
        sx.copy_(x)
        sres.copy_(res)
        graph.replay()
        torch.cuda.synchronize()
        xi, ri = x, res
        for layer, (g_eager, g_graph) in enumerate(zip(got, g_outs, strict=True)):
            want = _two_launches(xi * 1.0, ri, w, nw, k, True)
            for a, b, c in zip(g_eager, g_graph, want[:4], strict=True):
                assert torch.equal(a, c) and torch.equal(b, c), f"round {i} layer {layer}"
            xi, ri = want[2], want[3]
