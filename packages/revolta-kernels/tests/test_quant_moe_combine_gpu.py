"""One token's quantized MoE down projections and weighted sum in one kernel (``revolta::quant_moe_down_combine``,
csrc/quant_moe_combine.cuh) against the reference on the GPU, and against the two kernels it replaces.

Bound: the dense quantized kernels' per row (2e-3 * (|in| @ |W|) + 2e-3 * |row|, test_quant_gpu.py), carried
through the weights of the sum, plus 2e-3 of each weighted term for the fp16 roundings of the products;
relative L2 error <= 5e-3. Shapes: Qwen3-30B-A3B (no shared expert), Qwen3.5-35B-A3B and Qwen3.5-122B-A10B (a
shared expert stacked after the routed ones), and a 2-rank split.
"""

from __future__ import annotations

import pytest
import torch
from kernels_cases import random_expert_stacks

import revolta_kernels
from revolta_kernels import native_quant_moe, ops_moe, ops_quant
from revolta_kernels.reference import activation
from revolta_kernels.reference import quant as rq

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(not revolta_kernels.native_available(), reason=revolta_kernels.native_status()),
]


def make_layer(tokens: int, e: int, hidden: int, inter: int, top_k: int, bits: int, group: int, shared: bool,
               seed: int):
    """(h, qweight, scales, qzeros, ids, weights, x, gate), the op's argument order: gate/up rows h [T, R, 2 inter],
    stacked down projections [E, inter / pack, hidden] (the last expert the shared one when ``shared``), routing
    (ids, float32 weights) and the shared gate's x [T, hidden] and row [hidden]."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    qweight, scales, qzeros = random_expert_stacks(e, inter, hidden, bits, group, gen)
    routed = e - 1 if shared else e
    ids = torch.stack([torch.randperm(routed, device="cuda", generator=gen)[:top_k] for _ in range(tokens)])
    h = torch.randn(tokens, top_k + (1 if shared else 0), 2 * inter, device="cuda", generator=gen).half()
    weights = torch.softmax(torch.randn(tokens, top_k, device="cuda", generator=gen), -1)
    x = torch.randn(tokens, hidden, device="cuda", generator=gen).half()
    gate = (torch.randn(hidden, device="cuda", generator=gen) * 0.05).half()
    return h, qweight, scales, qzeros, ids, weights, x, gate


def reference(h, qweight, scales, qzeros, ids, weights, x, gate, bits, group, offset, shared_id):
    """(out, bound) in float32: the rows from the dequantized experts, weighted and summed."""
    rows_ids = torch.cat([ids, torch.full_like(ids[:, :1], shared_id)], 1) if shared_id >= 0 else ids
    inp = activation.silu_and_mul(h).float()
    t, r = rows_ids.shape
    rows = torch.zeros(t, r, qweight.shape[-1], device="cuda")
    row_bound = torch.zeros_like(rows)
    for e in torch.unique(rows_ids).tolist():
        if not 0 <= e < qweight.shape[0]:
            continue
        w = rq.dequantize(qweight[e], scales[e], qzeros[e], bits, group, offset)
        sel = rows_ids == e
        rows[sel] = inp[sel] @ w
        row_bound[sel] = 2e-3 * (inp[sel].abs() @ w.abs())
    row_bound += 2e-3 * rows.abs()
    top_k = ids.shape[1]
    wk = weights.half().float().unsqueeze(-1)
    out = (rows[:, :top_k] * wk).sum(1)
    bound = (row_bound[:, :top_k] * wk).sum(1) + 2e-3 * (rows[:, :top_k] * wk).abs().sum(1)
    if shared_id >= 0:
        sg = torch.sigmoid(x.float() @ gate.float()).unsqueeze(-1)
        out += sg * rows[:, top_k]
        bound += sg * row_bound[:, top_k] + 2e-3 * (sg * rows[:, top_k]).abs()
    return out, bound + 2e-3 * out.abs()


def assert_close(got, ref, bound):
    assert got.dtype == torch.float16 and got.shape == ref.shape
    assert bool(torch.isfinite(got).all())
    err = (got.float() - ref).abs()
    assert bool((err <= bound).all()), f"max excess {float((err - bound).max())}"
    assert float(torch.linalg.norm(got.float() - ref) / torch.linalg.norm(ref)) < 5e-3


def two_kernels(h, qweight, scales, qzeros, ids, weights, x, gate, bits, group, offset, shared_id):
    rows = ops_quant.quant_moe_matmul(h, qweight, scales, qzeros, ids, bits, group, offset, 1, shared_id)
    k = ids.shape[1]
    if shared_id < 0:
        return ops_moe.moe_combine(rows, weights, None, None, None)
    return ops_moe.moe_combine(rows[:, :k], weights, rows[:, k], x, gate)


# (experts incl. a stacked shared one, hidden, intermediate per rank, top_k, shared)
MODELS = [(128, 2048, 768, 8, False), (257, 2048, 512, 8, True), (257, 3072, 1024, 8, True),
          (257, 2048, 256, 8, True), (64, 1024, 128, 16, True)]


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize(("bits", "group", "offset"), [(4, 128, 0), (4, 64, 1), (4, 32, 0), (8, 128, 1)])
def test_fused_kernel_matches_reference_and_the_two_kernels(model, bits, group, offset):
    e, hidden, inter, top_k, shared = model
    if inter % group:
        pytest.skip("the down projection's input is not a whole number of groups")
    case = make_layer(1, e, hidden, inter, top_k, bits, group, shared, seed=hidden + inter + bits)
    shared_id = e - 1 if shared else -1
    assert native_quant_moe.fused_combine_supports(*case[:6], bits, group, shared_id, case[6], case[7])
    torch.full((hidden * 16,), float("nan"), device="cuda")  # poison what the output will reuse
    got = ops_quant.quant_moe_down_combine(*case[:6], bits, group, offset, shared_id, case[6], case[7])
    ref, bound = reference(*case, bits, group, offset, shared_id)
    assert_close(got, ref, bound)
    assert_close(got, two_kernels(*case, bits, group, offset, shared_id).float(), bound)


@pytest.mark.parametrize("tokens", [2, 5])
def test_more_tokens_take_the_two_kernels(tokens):
    case = make_layer(tokens, 257, 2048, 512, 8, 4, 128, True, seed=tokens)
    assert not native_quant_moe.fused_combine_supports(*case[:6], 4, 128, 256, case[6], case[7])
    got = ops_quant.quant_moe_down_combine(*case[:6], 4, 128, 0, 256, case[6], case[7])
    assert torch.equal(got, two_kernels(*case, 4, 128, 0, 256))
    assert_close(got, *reference(*case, 4, 128, 0, 256))


def test_out_of_range_expert_counts_as_a_zero_row():
    h, qweight, scales, qzeros, ids, weights, x, gate = make_layer(1, 65, 1024, 256, 4, 4, 128, True, seed=2)
    ids[0, 2] = 65  # names no expert
    got = ops_quant.quant_moe_down_combine(h, qweight, scales, qzeros, ids, weights, 4, 128, 0, 64, x, gate)
    assert_close(got, *reference(h, qweight, scales, qzeros, ids, weights, x, gate, 4, 128, 0, 64))


def test_graph_replay_follows_new_routing_and_inputs():
    h, qweight, scales, qzeros, ids, weights, x, gate = make_layer(1, 257, 2048, 512, 8, 4, 128, True, seed=5)
    static = [t.clone() for t in (h, ids, weights, x)]
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = ops_quant.quant_moe_down_combine(static[0], qweight, scales, qzeros, static[1], static[2], 4,
                                                      128, 0, 256, static[3], gate)
    for seed in (11, 12):
        f = make_layer(1, 257, 2048, 512, 8, 4, 128, True, seed=seed)
        fresh = (f[0], f[4], f[5], f[6])  # h, ids, weights, x
        for dst, src in zip(static, fresh, strict=True):
            dst.copy_(src)
        graph.replay()
        eager = ops_quant.quant_moe_down_combine(fresh[0], qweight, scales, qzeros, fresh[1], fresh[2], 4, 128, 0,
                                                 256, fresh[3], gate)
        assert torch.equal(static_out, eager)
