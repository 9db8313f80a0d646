"""CPU reference of the quantized mixture-of-experts projection (``revolta::quant_moe_matmul``) against float64
computed from the unpacked integers, row by row."""

from __future__ import annotations

import pytest
import torch

from revolta_kernels import ops_quant
from revolta_kernels.reference import quant as rq


def make_experts(e: int, k: int, n: int, bits: int, group: int, seed: int):
    """Stacked kernel-layout experts and their integers: (qweight, scales, qzeros, q [E, K, N], z [E, K/G, N])."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randint(0, 1 << bits, (e, k, n), generator=gen)
    z = torch.randint(0, 1 << bits, (e, k // group, n), generator=gen)
    s = (torch.rand(e, k // group, n, generator=gen) * 0.02 + 0.001).half()
    qweight = torch.stack([rq.pack_int32(q[i], bits, 0) for i in range(e)])
    qzeros = torch.stack([rq.pack_int32(z[i], bits, 1) for i in range(e)])
    return qweight, s, qzeros, q, z


def float64_rows(inp, ids, q, z, s, group, offset):
    """out[t, k] = inp[t, k] @ ((q[e] - z[e] - offset) * s[e]) in float64, inp [T, top_k, K]."""
    t, top_k = ids.shape
    out = torch.zeros(t, top_k, q.shape[-1], dtype=torch.float64)
    for i in range(t):
        for j in range(top_k):
            e = int(ids[i, j])
            zz = (z[e].double() + offset).repeat_interleave(group, 0)
            w = (q[e].double() - zz) * s[e].double().repeat_interleave(group, 0)
            out[i, j] = inp[i, j].double() @ w
    return out


@pytest.mark.parametrize(("bits", "group", "offset"), [(4, 32, 0), (4, 64, 1), (4, 128, 0), (8, 32, 1), (8, 64, 0)])
@pytest.mark.parametrize("act", [0, 1])
@pytest.mark.parametrize("tokens", [1, 5])
@pytest.mark.parametrize("shared", [False, True])
def test_quant_moe_matmul_matches_float64(bits, group, offset, act, tokens, shared):
    """shared: expert e - 1 (a stacked shared expert) is each token's extra last row."""
    e, k, n, top_k = 6, 128, 48, 3
    qweight, s, qzeros, q, z = make_experts(e, k, n, bits, group, seed=bits * 100 + group + act)
    gen = torch.Generator().manual_seed(tokens)
    ids = torch.stack([torch.randperm(e - 1, generator=gen)[:top_k] for _ in range(tokens)])
    rows_ids = torch.cat([ids, torch.full((tokens, 1), e - 1)], 1) if shared else ids
    per_token = rows_ids.shape[1]
    if act == 0:
        x = torch.randn(tokens, k, generator=gen)
        inp = x.unsqueeze(1).expand(tokens, per_token, k)
    else:
        x = torch.randn(tokens, per_token, 2 * k, generator=gen)
        inp = torch.nn.functional.silu(x[..., :k]) * x[..., k:]
    got = ops_quant.quant_moe_matmul(x, qweight, s, qzeros, ids, bits, group, offset, act, e - 1 if shared else -1)
    ref = float64_rows(inp, rows_ids, q, z, s, group, offset)
    assert got.shape == (tokens, per_token, n) and got.dtype == x.dtype
    assert torch.allclose(got.double(), ref, rtol=1e-4, atol=1e-4 * float(ref.abs().max()))


def test_each_row_takes_its_own_expert_and_an_unknown_id_gives_zeros():
    e, k, n = 4, 64, 16
    qweight, s, qzeros, _, _ = make_experts(e, k, n, 4, 32, seed=7)
    x = torch.randn(2, k)
    ids = torch.tensor([[3, 0], [1, e]])  # id e names no expert
    got = ops_quant.quant_moe_matmul(x, qweight, s, qzeros, ids, 4, 32, 0, 0)
    for t, j, expert in ((0, 0, 3), (0, 1, 0), (1, 0, 1)):
        alone = rq.quant_matmul(x[t:t + 1], qweight[expert], s[expert], qzeros[expert], 4, 32)
        assert torch.equal(got[t, j], alone[0])
    assert torch.equal(got[1, 1], torch.zeros(n))


def test_act_must_be_zero_or_one():
    qweight, s, qzeros, _, _ = make_experts(2, 32, 8, 4, 32, seed=0)
    with pytest.raises(ValueError, match="act must be"):
        ops_quant.quant_moe_matmul(torch.randn(1, 32), qweight, s, qzeros, torch.zeros(1, 1, dtype=torch.int64), 4,
                                   32, 0, 2)


def test_op_passes_torch_opcheck_with_and_without_a_shared_row():
    """Schema, fake impl (the extra row's shape included) and no mutation (what torch.compile relies on)."""
    qweight, s, qzeros, _, _ = make_experts(4, 64, 16, 4, 32, seed=2)
    ids = torch.tensor([[0, 2], [1, 0]])
    x = torch.randn(2, 64)
    torch.library.opcheck(ops_quant.quant_moe_matmul, (x, qweight, s, qzeros, ids, 4, 32, 0, 0))
    torch.library.opcheck(ops_quant.quant_moe_matmul, (x, qweight, s, qzeros, ids, 4, 32, 0, 0, 3))
    torch.library.opcheck(ops_quant.quant_moe_matmul, (torch.randn(2, 3, 128), qweight, s, qzeros, ids, 4, 32, 0, 1, 3))


@pytest.mark.parametrize(("bits", "group", "offset"), [(4, 32, 0), (4, 64, 1), (8, 32, 1)])
@pytest.mark.parametrize("tokens", [1, 4])
@pytest.mark.parametrize("shared", [False, True])
def test_quant_moe_down_combine_matches_float64(bits, group, offset, tokens, shared):
    """The down projections and the weighted sum: out[t] = sum_k w[t, k] * row(t, k) + sigmoid(x[t] . g) *
    shared row(t), against float64 from the unpacked integers."""
    e, k, n, top_k = 6, 128, 48, 3
    qweight, s, qzeros, q, z = make_experts(e, k, n, bits, group, seed=bits * 10 + group + tokens)
    gen = torch.Generator().manual_seed(tokens + 7)
    ids = torch.stack([torch.randperm(e - 1, generator=gen)[:top_k] for _ in range(tokens)])
    rows_ids = torch.cat([ids, torch.full((tokens, 1), e - 1)], 1) if shared else ids
    h = torch.randn(tokens, rows_ids.shape[1], 2 * k, generator=gen)
    weights = torch.softmax(torch.randn(tokens, top_k, generator=gen), -1)
    x, gate = (torch.randn(tokens, n, generator=gen), torch.randn(n, generator=gen) * 0.1) if shared else (None, None)
    got = ops_quant.quant_moe_down_combine(h, qweight, s, qzeros, ids, weights, bits, group, offset,
                                           e - 1 if shared else -1, x, gate)
    rows = float64_rows(torch.nn.functional.silu(h[..., :k]) * h[..., k:], rows_ids, q, z, s, group, offset)
    ref = (rows[:, :top_k] * weights.double().unsqueeze(-1)).sum(1)
    if shared:
        ref += torch.sigmoid(x.double() @ gate.double()).unsqueeze(-1) * rows[:, top_k]
    assert got.shape == (tokens, n) and got.dtype == h.dtype
    assert torch.allclose(got.double(), ref, rtol=1e-4, atol=1e-4 * float(ref.abs().max()))


def test_quant_moe_down_combine_needs_the_shared_gate_for_a_shared_row():
    qweight, s, qzeros, _, _ = make_experts(4, 32, 8, 4, 32, seed=1)
    h, ids, weights = torch.randn(1, 3, 64), torch.tensor([[0, 1]]), torch.full((1, 2), 0.5)
    with pytest.raises(ValueError, match="needs x and shared_gate"):
        ops_quant.quant_moe_down_combine(h, qweight, s, qzeros, ids, weights, 4, 32, 0, 3, None, None)


def test_quant_moe_down_combine_passes_torch_opcheck():
    qweight, s, qzeros, _, _ = make_experts(4, 64, 16, 4, 32, seed=3)
    ids, weights = torch.tensor([[0, 2], [1, 0]]), torch.rand(2, 2)
    torch.library.opcheck(ops_quant.quant_moe_down_combine,
                          (torch.randn(2, 2, 128), qweight, s, qzeros, ids, weights, 4, 32, 0))
    torch.library.opcheck(ops_quant.quant_moe_down_combine,
                          (torch.randn(2, 3, 128), qweight, s, qzeros, ids, weights, 4, 32, 0, 3, torch.randn(2, 16),
                           torch.randn(16)))


@pytest.mark.parametrize(("bits", "group", "offset"), [(4, 32, 0), (4, 64, 1), (8, 32, 1)])
def test_quant_moe_gemm_matches_float64(bits, group, offset):
    """Rows sorted by expert: each expert's slice times its own weights; an expert with no rows, and rows past
    offsets[E] (zeros)."""
    e, k, n = 5, 64, 24
    qweight, s, qzeros, q, z = make_experts(e, k, n, bits, group, seed=bits + group)
    offsets = torch.tensor([0, 3, 3, 7, 8, 12])  # expert 1 has none; rows 12..13 belong to no expert
    x = torch.randn(14, k, generator=torch.Generator().manual_seed(3))
    got = ops_quant.quant_moe_gemm(x, offsets, qweight, s, qzeros, bits, group, offset)
    ids = torch.zeros(14, 1, dtype=torch.int64)
    for i in range(e):
        ids[offsets[i]:offsets[i + 1]] = i
    ref = float64_rows(x.unsqueeze(1), ids, q, z, s, group, offset)[:, 0]
    ref[12:] = 0
    assert got.shape == (14, n) and got.dtype == x.dtype
    assert torch.allclose(got.double(), ref, rtol=1e-4, atol=1e-4 * float(ref.abs().max()))
    torch.library.opcheck(ops_quant.quant_moe_gemm, (x, offsets, qweight, s, qzeros, bits, group, offset))


@pytest.mark.parametrize("offsets", [[0, 3, 2, 5, 6, 7], [1, 3, 4, 5, 6, 7], [0, 3, 4, 5, 6, 15], [0, 1, 2]])
def test_quant_moe_gemm_rejects_bad_offsets(offsets):
    qweight, s, qzeros, _, _ = make_experts(5, 64, 24, 4, 32, seed=1)
    with pytest.raises(ValueError, match="offsets must be 6 non-decreasing row offsets"):
        ops_quant.quant_moe_gemm(torch.randn(8, 64), torch.tensor(offsets), qweight, s, qzeros, 4, 32, 0)


@pytest.mark.parametrize("silu", [False, True])
def test_quant_moe_gemm_row_maps_match_float64(silu):
    """The row maps of a MoE layer's two calls: sorted row r multiplies token x_rows[r] // x_row_div of x and its
    result lands at row out_rows[r]; with silu the result is SiLU-and-mul of the row's [gate, up] halves."""
    e, k, n, tokens, top_k = 4, 64, 16, 5, 2
    qweight, s, qzeros, q, z = make_experts(e, k, n, 4, 32, seed=7)
    gen = torch.Generator().manual_seed(8)
    ids = torch.randint(0, e, (tokens, top_k), generator=gen)
    ids[2, 1] = e  # routed past the stacks: sorted last, zeros
    order = torch.argsort(ids.reshape(-1), stable=True)
    offsets = torch.searchsorted(ids.reshape(-1)[order], torch.arange(e + 1))
    x = torch.randn(tokens, k, generator=gen)
    got = ops_quant.quant_moe_gemm(x, offsets, qweight, s, qzeros, 4, 32, 0, x_rows=order, x_row_div=top_k,
                                   out_rows=order, silu=silu)
    # out_rows = order puts every sorted row back in routed (token, slot) order: row t * top_k + j is expert
    # ids[t, j] applied to token t
    ref = float64_rows(x.unsqueeze(1).expand(tokens, top_k, k), ids.clamp_max(e - 1), q, z, s, 32, 0)
    ref[2, 1] = 0
    ref = ref.reshape(-1, n)
    if silu:
        ref = torch.nn.functional.silu(ref[:, : n // 2]) * ref[:, n // 2:]
    assert got.shape == ref.shape
    assert torch.allclose(got.double(), ref, rtol=1e-4, atol=1e-4 * float(ref.abs().max()))
    torch.library.opcheck(ops_quant.quant_moe_gemm, (x, offsets, qweight, s, qzeros, 4, 32, 0),
                          {"x_rows": order, "x_row_div": top_k, "out_rows": order, "silu": silu})


def test_quant_moe_gemm_rejects_bad_row_maps():
    qweight, s, qzeros, _, _ = make_experts(2, 64, 8, 4, 32, seed=2)
    x, offsets = torch.randn(3, 64), torch.tensor([0, 2, 6])
    with pytest.raises(ValueError, match=r"x_rows // 2 must index x's 3 rows, got 0 .. 3"):
        ops_quant.quant_moe_gemm(x, offsets, qweight, s, qzeros, 4, 32, 0, x_rows=torch.tensor([0, 1, 2, 3, 4, 7]),
                                 x_row_div=2)
    with pytest.raises(ValueError, match=r"out_rows must be a permutation of 0 .. 5"):
        ops_quant.quant_moe_gemm(x, offsets, qweight, s, qzeros, 4, 32, 0, x_rows=torch.arange(6), x_row_div=2,
                                 out_rows=torch.tensor([0, 1, 2, 3, 4, 4]))
    with pytest.raises(ValueError, match="x_row_div must be at least 1"):
        ops_quant.quant_moe_gemm(x, offsets, qweight, s, qzeros, 4, 32, 0, x_rows=torch.arange(6), x_row_div=0)
    with pytest.raises(ValueError, match="silu needs .gate, up. column halves, got 7 columns"):
        ops_quant.quant_moe_gemm(x, offsets, qweight[..., :7].contiguous(), s[..., :7].contiguous(), qzeros, 4, 32, 0,
                                 silu=True)
