"""Native quantized mixture-of-experts projection (csrc/quant_moe.cuh) against the reference on the GPU.

Bound as the dense quantized kernels' (test_quant_gpu.py): |native - reference| <= 2e-3 * (|in| @ |W|) + 2e-3 *
|reference| elementwise, relative L2 error <= 5e-3. Shapes: the experts of Qwen3-30B-A3B, Qwen3.5-35B-A3B and
Qwen3.5-122B-A10B, whole and split over 2 and 4 ranks. Also: CUDA-graph replay with new routing equals eager calls,
and an unsupported case runs the reference instead of failing. One token runs csrc/quant_moe_gemv_one_token.cuh
(where its shared memory fits), more tokens quant_moe_gemv_kernel.
"""

from __future__ import annotations

import pytest
import torch
from kernels_cases import random_expert_stacks

import revolta_kernels
from revolta_kernels import native_quant_moe, ops_quant
from revolta_kernels.reference import activation
from revolta_kernels.reference import quant as rq

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(not revolta_kernels.native_available(), reason=revolta_kernels.native_status()),
]


def make_case(tokens: int, e: int, k: int, n: int, top_k: int, bits: int, group: int, act: int, seed: int):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    qweight, scales, qzeros = random_expert_stacks(e, k, n, bits, group, gen)
    shape = (tokens, k) if act == 0 else (tokens, top_k, 2 * k)
    x = torch.randn(*shape, device="cuda", generator=gen).half()
    ids = torch.stack([torch.randperm(e, device="cuda", generator=gen)[:top_k] for _ in range(tokens)])
    return x, qweight, scales, qzeros, ids


def assert_close(got, x, qweight, scales, qzeros, ids, bits, group, offset, act):
    t, top_k = ids.shape
    inp = x.unsqueeze(1).expand(t, top_k, x.shape[-1]) if act == 0 else activation.silu_and_mul(x)
    ref = torch.empty(t, top_k, qweight.shape[-1], device="cuda")
    bound = torch.empty_like(ref)
    for e in torch.unique(ids).tolist():
        w = rq.dequantize(qweight[e], scales[e], qzeros[e], bits, group, offset)
        rows = ids == e
        ref[rows] = inp[rows].float() @ w
        bound[rows] = 2e-3 * (inp[rows].float().abs() @ w.abs())
    bound += 2e-3 * ref.abs()
    assert got.dtype == torch.float16 and got.shape == ref.shape
    assert bool(torch.isfinite(got).all())
    err = (got.float() - ref).abs()
    assert bool((err <= bound).all()), f"max excess {float((err - bound).max())}"
    assert float(torch.linalg.norm(got.float() - ref) / torch.linalg.norm(ref)) < 5e-3


# (experts, hidden, intermediate per rank, top_k): Qwen3-30B-A3B, Qwen3.5-35B-A3B, Qwen3.5-122B-A10B, and
# tensor-parallel splits of their intermediate size
MODELS = [(128, 2048, 768, 8), (256, 2048, 512, 8), (256, 3072, 1024, 8), (128, 2048, 384, 8), (256, 2048, 256, 8),
          (256, 3072, 256, 8)]


@pytest.mark.parametrize("tokens", [1, 2, 7, 64])
@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize(("bits", "group", "offset"), [(4, 128, 0), (4, 64, 1), (4, 32, 0), (8, 128, 1)])
def test_gate_up_and_down_match_reference(tokens, model, bits, group, offset):
    e, hidden, inter, top_k = model
    if inter % group:
        pytest.skip("the down projection's input is not a whole number of groups")
    for act, k, n in ((0, hidden, 2 * inter), (1, inter, hidden)):
        x, qweight, scales, qzeros, ids = make_case(tokens, e, k, n, top_k, bits, group, act, seed=tokens + act)
        assert native_quant_moe.native_supports(x, qweight, scales, qzeros, ids, bits, group, act)
        torch.full((tokens * top_k * n * 4,), float("nan"), device="cuda")  # poison what the output will reuse
        got = ops_quant.quant_moe_matmul(x, qweight, scales, qzeros, ids, bits, group, offset, act)
        assert_close(got, x, qweight, scales, qzeros, ids, bits, group, offset, act)


@pytest.mark.parametrize("tokens", [1, 2, 7])
@pytest.mark.parametrize(("bits", "group", "offset"), [(4, 128, 0), (4, 32, 1), (8, 64, 0)])
def test_both_kernels_match_reference(tokens, bits, group, offset):
    """The one-token kernel at one token, the general one at two and seven (Qwen3.5-122B-A10B's shapes)."""
    e, hidden, inter, top_k = 256, 3072, 1024, 8
    for act, k, n in ((0, hidden, 2 * inter), (1, inter, hidden)):
        x, qweight, scales, qzeros, ids = make_case(tokens, e, k, n, top_k, bits, group, act, seed=tokens + 3 * act)
        torch.full((tokens * top_k * n * 4,), float("nan"), device="cuda")  # poison what the output will reuse
        got = ops_quant.quant_moe_matmul(x, qweight, scales, qzeros, ids, bits, group, offset, act)
        assert_close(got, x, qweight, scales, qzeros, ids, bits, group, offset, act)


def test_small_groups_at_large_k_take_the_general_kernel():
    """Group 8 at K = 8192: the one-token kernel's staged scales would not fit its shared memory; the call still runs
    (the general kernel) and matches."""
    x, qweight, scales, qzeros, ids = make_case(1, 4, 8192, 64, 2, 4, 8, 0, seed=9)
    got = ops_quant.quant_moe_matmul(x, qweight, scales, qzeros, ids, 4, 8, 0, 0)
    assert_close(got, x, qweight, scales, qzeros, ids, 4, 8, 0, 0)


def test_out_of_range_expert_gives_a_zero_row():
    x, qweight, scales, qzeros, ids = make_case(1, 16, 1024, 256, 4, 4, 128, 0, seed=4)
    ids[0, 1] = 16
    torch.full((4 * 256 * 4,), float("nan"), device="cuda")
    got = ops_quant.quant_moe_matmul(x, qweight, scales, qzeros, ids, 4, 128, 0, 0)
    assert bool((got[0, 1] == 0).all())
    keep = torch.tensor([0, 2, 3], device="cuda")
    assert_close(got[:, keep], x, qweight, scales, qzeros, ids[:, keep], 4, 128, 0, 0)


@pytest.mark.parametrize("tokens", [1, 4])
def test_graph_replay_follows_new_routing(tokens):
    x, qweight, scales, qzeros, ids = make_case(tokens, 64, 1024, 512, 8, 4, 128, 0, seed=3)
    static_x, static_ids = x.clone(), ids.clone()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = ops_quant.quant_moe_matmul(static_x, qweight, scales, qzeros, static_ids, 4, 128, 0, 0)
    for seed in (11, 12):
        x2, _, _, _, ids2 = make_case(tokens, 64, 1024, 512, 8, 4, 128, 0, seed=seed)
        static_x.copy_(x2)
        static_ids.copy_(ids2)
        graph.replay()
        eager = ops_quant.quant_moe_matmul(x2, qweight, scales, qzeros, ids2, 4, 128, 0, 0)
        assert torch.equal(static_out, eager)


def test_unsupported_case_runs_the_reference():
    x, qweight, scales, qzeros, ids = make_case(2, 8, 96, 40, 2, 4, 32, 0, seed=5)
    ids = ids.to(torch.int32)  # the kernel reads int64 ids
    assert not native_quant_moe.native_supports(x, qweight, scales, qzeros, ids, 4, 32, 0)
    got = ops_quant.quant_moe_matmul(x, qweight, scales, qzeros, ids, 4, 32, 0, 0)
    assert torch.equal(got, rq.quant_moe_matmul(x, qweight, scales, qzeros, ids, 4, 32, 0, 0))


@pytest.mark.parametrize("tokens", [1, 7, 64])
@pytest.mark.parametrize(("bits", "group", "offset"), [(4, 128, 0), (4, 32, 1), (8, 128, 1)])
@pytest.mark.parametrize(("hidden", "inter"), [(2048, 512), (3072, 1024), (2048, 256)])
def test_stacked_shared_expert_is_each_tokens_last_row(tokens, bits, group, offset, hidden, inter):
    """shared_id: the shared expert stacked after 256 routed ones (Qwen3.5-35B/122B and a 2-rank split) runs as one
    more row per token, [T, top_k + 1, N], in the same launch."""
    e, top_k = 257, 8
    for act, k, n in ((0, hidden, 2 * inter), (1, inter, hidden)):
        x, qweight, scales, qzeros, ids = make_case(tokens, e, k, n, top_k + 1, bits, group, act, seed=tokens + k)
        routed = ids[:, :top_k].contiguous()
        rows = torch.cat([routed, torch.full_like(routed[:, :1], e - 1)], 1)
        assert native_quant_moe.native_supports(x, qweight, scales, qzeros, routed, bits, group, act, e - 1)
        torch.full((tokens * (top_k + 1) * n * 4,), float("nan"), device="cuda")  # poison the output's memory
        got = ops_quant.quant_moe_matmul(x, qweight, scales, qzeros, routed, bits, group, offset, act, e - 1)
        assert_close(got, x, qweight, scales, qzeros, rows, bits, group, offset, act)
