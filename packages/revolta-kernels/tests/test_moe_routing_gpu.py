"""Native MoE routing and combination (csrc/moe_routing.cuh) against the reference on the GPU.

``moe_topk_softmax``: the same logits chosen in the same order as torch.topk on fresh random logits, weights to
fp32 rounding, with and without renormalisation, for the router widths of Qwen3-30B-A3B (128 experts, top 8),
Qwen3.5-35B/122B (256, top 8), 512 experts and top 16, in fp16 / bf16 / fp32 logits. Where logits tie (bf16 rounds
some of 512 evenly spaced values together) the kernel takes the lower expert id first; torch.topk's order among
ties is unspecified, so ids are compared through the logits they pick. ``moe_combine``: outputs within
an ulp of the reference's fp16 result (the sum order differs), with and without a gated shared expert.
"""

from __future__ import annotations

import pytest
import torch

import revolta_kernels
from revolta_kernels import ops_moe
from revolta_kernels.reference import moe as ref_moe

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(not revolta_kernels.native_available(), reason=revolta_kernels.native_status()),
]


def _ranked_logits(tokens: int, experts: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Each row a random permutation of evenly spaced logits, rounded to ``dtype``."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    ranks = torch.stack([torch.randperm(experts, device="cuda", generator=gen) for _ in range(tokens)])
    spacing = 0.02 if dtype == torch.float16 else 0.1  # bf16 keeps 8 bits: wider steps stay distinct
    return ((ranks.float() - experts / 2) * spacing).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize(("experts", "top_k"), [(128, 8), (256, 8), (512, 16), (60, 4), (8, 8)])
@pytest.mark.parametrize("renormalize", [False, True])
@pytest.mark.parametrize("tokens", [1, 3, 64])
def test_topk_softmax_matches_reference(dtype, experts, top_k, renormalize, tokens):
    logits = _ranked_logits(tokens, experts, dtype, seed=experts + tokens)
    weights, ids = ops_moe.moe_topk_softmax(logits, top_k, renormalize)
    want_w, want_ids = ref_moe.moe_topk_softmax(logits, top_k, renormalize)
    assert ids.dtype == torch.int64 and weights.dtype == torch.float32 and ids.shape == (tokens, top_k)
    _assert_same_choice(logits, ids, want_ids)
    torch.testing.assert_close(weights, want_w, rtol=2e-6, atol=1e-7)


def _assert_same_choice(logits: torch.Tensor, ids: torch.Tensor, want_ids: torch.Tensor) -> None:
    """The same logits in the same order (ids may differ only among equal logits), ties in ascending id order."""
    chosen, want = logits.float().gather(1, ids), logits.float().gather(1, want_ids)
    assert torch.equal(chosen, want)
    ties = chosen[:, 1:] == chosen[:, :-1]
    assert bool((ids[:, 1:] > ids[:, :-1])[ties].all())
    if not bool(ties.any()):
        assert torch.equal(ids, want_ids)


def test_topk_softmax_strided_logits():
    wide = _ranked_logits(4, 300, torch.float16, seed=1)
    logits = wide[:, :256]  # row stride 300
    weights, ids = ops_moe.moe_topk_softmax(logits, 8, True)
    want_w, want_ids = ref_moe.moe_topk_softmax(logits, 8, True)
    _assert_same_choice(logits, ids, want_ids)
    torch.testing.assert_close(weights, want_w, rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("hidden", [2048, 3072, 4096, 136])
@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("tokens", [1, 5, 64])
@pytest.mark.parametrize("top_k", [1, 8, 16, 17])  # 17: past the kernel's 16 rows, the reference runs
def test_combine_matches_reference(dtype, hidden, shared, tokens, top_k):
    gen = torch.Generator(device="cuda").manual_seed(hidden + tokens + top_k)
    y = torch.randn(tokens, top_k, hidden, device="cuda", generator=gen).to(dtype)
    weights = torch.softmax(torch.randn(tokens, top_k, device="cuda", generator=gen), -1)
    s = torch.randn(tokens, hidden, device="cuda", generator=gen).to(dtype) if shared else None
    x = torch.randn(tokens, hidden, device="cuda", generator=gen).to(dtype) if shared else None
    gate = (torch.randn(hidden, device="cuda", generator=gen) / hidden**0.5).to(dtype) if shared else None
    torch.full((tokens * hidden * 4,), float("nan"), device="cuda")  # poison what the output will reuse
    got = ops_moe.moe_combine(y, weights, s, x, gate)
    want = ref_moe.moe_combine(y, weights, s, x, gate)
    assert got.dtype == dtype and got.shape == (tokens, hidden) and bool(torch.isfinite(got).all())
    ulp = 2.0 ** (-10 if dtype == torch.float16 else -7)
    err = (got.float() - want.float()).abs()
    # one rounding step of the result (the fp32 sum order differs), and of the gate's sigmoid
    routed = ref_moe.moe_combine(y, weights, None, None, None).float().abs()
    bound = 2 * ulp * (want.float().abs() + routed + (s.float().abs() if shared else 0)) + 1e-6
    assert bool((err <= bound).all()), float((err - bound).max())


def test_combine_reads_x_with_a_row_stride():
    gen = torch.Generator(device="cuda").manual_seed(5)
    y = torch.randn(3, 4, 256, device="cuda", generator=gen).half()
    weights = torch.rand(3, 4, device="cuda", generator=gen)
    s = torch.randn(3, 256, device="cuda", generator=gen).half()
    x = torch.randn(3, 512, device="cuda", generator=gen).half()[:, 128:384]  # stride 512
    gate = torch.randn(256, device="cuda", generator=gen).half() / 16
    got = ops_moe.moe_combine(y, weights, s, x, gate)
    want = ref_moe.moe_combine(y, weights, s, x, gate)
    torch.testing.assert_close(got.float(), want.float(), rtol=4e-3, atol=1e-3)


@pytest.mark.parametrize("tokens", [1, 9])
def test_combine_takes_the_shared_expert_as_the_last_row_of_y(tokens):
    """The engine's layout when the shared expert is stacked with the experts: y [T, K + 1, H], the routed rows
    y[:, :K] and the shared row y[:, K] passed as strided views."""
    gen = torch.Generator(device="cuda").manual_seed(tokens)
    k, h = 8, 2048
    rows = torch.randn(tokens, k + 1, h, device="cuda", generator=gen).half()
    weights = torch.softmax(torch.randn(tokens, k, device="cuda", generator=gen), -1)
    x = torch.randn(tokens, h, device="cuda", generator=gen).half()
    gate = (torch.randn(h, device="cuda", generator=gen) / h**0.5).half()
    got = ops_moe.moe_combine(rows[:, :k], weights, rows[:, k], x, gate)
    want = ref_moe.moe_combine(rows[:, :k].contiguous(), weights, rows[:, k].contiguous(), x, gate)
    torch.testing.assert_close(got.float(), want.float(), rtol=4e-3, atol=2e-3)
