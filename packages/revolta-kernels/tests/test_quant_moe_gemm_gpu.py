"""Native grouped GEMM of stacked quantized experts over rows sorted by expert (csrc/quant_moe_gemm.cuh, a MoE
prefill) against the reference on the GPU, with test_quant_moe_gpu.py's bound: |native - reference| <= 2e-3 *
(|x| @ |W|) + 2e-3 * |reference| elementwise, relative L2 error <= 5e-3. Shapes: the experts of Qwen3-30B-A3B and
Qwen3.5-35B-A3B (gate/up and down, one shared expert stacked last), a 2-rank split, int4 g128 / g64 / g32 and int8;
skewed routing (experts with no rows, experts over several 64-row tiles), rows past the last offset, offsets that
point outside the rows (clamped, never read out of bounds), and the per-expert GEMM it replaces; both tiles, as the
launcher picks them by the rows per expert (short up to 48 on average where K % 64 == 0, wide otherwise: 300 and 8192
rows over 128-257 experts take one each); K not a multiple of the short tile's step, and K loops of 1 to 10 steps. The row maps: each sorted row's token gathered from the unsorted x, results scattered to the routed order, the
SiLU-and-mul epilogue of the gate/up call, zeros (not a caller's fill) for rows outside every expert's, and indices out of range
neither read nor written."""

from __future__ import annotations

import pytest
import torch
from kernels_cases import poison_allocator, random_expert_stacks

import revolta_kernels
from revolta_kernels import ops_quant
from revolta_kernels.ops import silu_and_mul
from revolta_kernels.reference import quant as rq

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(not revolta_kernels.native_available(), reason=revolta_kernels.native_status()),
]


def skewed_offsets(e: int, rows: int, gen: torch.Generator) -> torch.Tensor:
    """Row offsets of ``rows`` routed rows over ``e`` experts: a third of the experts get none, one gets a fifth of
    them (several 64-row tiles), the rest spread at random."""
    weights = torch.rand(e, generator=gen, device="cuda")
    weights[torch.randperm(e, generator=gen, device="cuda")[: e // 3]] = 0
    weights[int(torch.randint(0, e, (1,), generator=gen, device="cuda"))] = weights.sum() / 4
    ids = torch.multinomial(weights, rows, replacement=True, generator=gen)
    counts = torch.bincount(ids, minlength=e)
    return torch.cat([counts.new_zeros(1), counts.cumsum(0)])


def assert_close(got, x, offsets, qweight, scales, qzeros, bits, group, offset):
    ref = torch.zeros(x.shape[0], qweight.shape[-1], device="cuda")
    bound = torch.zeros_like(ref)
    bounds = offsets.tolist()
    for e in range(qweight.shape[0]):
        lo, hi = max(0, min(bounds[e], x.shape[0])), max(0, min(bounds[e + 1], x.shape[0]))
        if hi > lo:
            w = rq.dequantize(qweight[e], scales[e], qzeros[e], bits, group, offset)
            ref[lo:hi] = x[lo:hi].float() @ w
            bound[lo:hi] = 2e-3 * (x[lo:hi].float().abs() @ w.abs())
    bound += 2e-3 * ref.abs()
    assert got.shape == ref.shape and got.dtype == torch.float16
    assert not torch.isnan(got).any()
    err = (got.float() - ref).abs()
    assert bool((err <= bound + 1e-6).all()), f"max excess {float((err - bound).max()):.3g}"
    assert float(err.norm() / ref.norm().clamp_min(1e-12)) < 5e-3


@pytest.mark.parametrize(("e", "k", "n"), [
    (257, 2048, 1024),  # Qwen3.5-35B-A3B gate/up (256 experts + the shared one)
    (257, 512, 2048),  # ... down
    (128, 2048, 1536),  # Qwen3-30B-A3B gate/up
    (128, 768, 2048),  # ... down
    (128, 2048, 768),  # Qwen3-30B-A3B gate/up over 2 ranks
])
@pytest.mark.parametrize("rows", [300, 8192])
def test_sorted_gemm_matches_reference(e, k, n, rows):
    gen = torch.Generator(device="cuda").manual_seed(e + k + n + rows)
    qweight, scales, qzeros = random_expert_stacks(e, k, n, 4, 128, gen)
    offsets = skewed_offsets(e - 1, rows, gen)  # the last (shared) expert gets no rows, as in the engine
    offsets = torch.cat([offsets, offsets[-1:]])
    x = torch.randn(rows, k, device="cuda", generator=gen).half()
    poison_allocator()
    got = ops_quant.quant_moe_gemm(x, offsets, qweight, scales, qzeros, 4, 128, 0)
    assert_close(got, x, offsets, qweight, scales, qzeros, 4, 128, 0)


@pytest.mark.parametrize(("bits", "group", "offset"), [(4, 64, 0), (4, 32, 1), (8, 128, 0), (8, 32, 1)])
def test_sorted_gemm_settings(bits, group, offset):
    gen = torch.Generator(device="cuda").manual_seed(bits * 1000 + group)
    e, k, n, rows = 64, 1024, 512, 1000
    qweight, scales, qzeros = random_expert_stacks(e, k, n, bits, group, gen)
    offsets = skewed_offsets(e, rows - 37, gen)  # 37 rows past the last offset: zeros
    x = torch.randn(rows, k, device="cuda", generator=gen).half()
    poison_allocator()
    got = ops_quant.quant_moe_gemm(x, offsets, qweight, scales, qzeros, bits, group, offset)
    assert_close(got, x, offsets, qweight, scales, qzeros, bits, group, offset)
    assert bool((got[rows - 37:] == 0).all())


def test_sorted_gemm_k_not_a_multiple_of_64():
    """K = 96 (a multiple of 32, not of 64): the short tile does not apply, the wide one runs instead."""
    gen = torch.Generator(device="cuda").manual_seed(5)
    e, k, n, rows = 8, 96, 256, 200
    qweight, scales, qzeros = random_expert_stacks(e, k, n, 4, 32, gen)
    offsets = skewed_offsets(e, rows, gen)
    x = torch.randn(rows, k, device="cuda", generator=gen).half()
    poison_allocator()
    got = ops_quant.quant_moe_gemm(x, offsets, qweight, scales, qzeros, 4, 32, 0)
    assert_close(got, x, offsets, qweight, scales, qzeros, 4, 32, 0)


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("k", [32, 64, 96, 128, 192, 320])
def test_sorted_gemm_short_and_odd_k_loops(k, bits):
    """K loops of 1 to 10 steps, odd and even counts (K = 32 and 96 are not multiples of the short tile's step: the
    wide tile runs)."""
    gen = torch.Generator(device="cuda").manual_seed(100 + k + bits)
    e, n, rows = 12, 384, 150
    qweight, scales, qzeros = random_expert_stacks(e, k, n, bits, 32, gen)
    offsets = skewed_offsets(e, rows, gen)
    x = torch.randn(rows, k, device="cuda", generator=gen).half()
    poison_allocator()
    got = ops_quant.quant_moe_gemm(x, offsets, qweight, scales, qzeros, bits, 32, 0)
    assert_close(got, x, offsets, qweight, scales, qzeros, bits, 32, 0)


def test_sorted_gemm_equals_per_expert_gemm():
    """The per-expert tensor-core GEMM (revolta::quant_matmul, M > 8) that the engine's prefill loop ran: the same
    values within the fp16 output rounding (same K order, other tile shapes)."""
    gen = torch.Generator(device="cuda").manual_seed(7)
    e, k, n = 16, 2048, 1024
    qweight, scales, qzeros = random_expert_stacks(e, k, n, 4, 128, gen)
    offsets = skewed_offsets(e, 2000, gen)
    x = torch.randn(2000, k, device="cuda", generator=gen).half()
    got = ops_quant.quant_moe_gemm(x, offsets, qweight, scales, qzeros, 4, 128, 0)
    bounds = offsets.tolist()
    for i in range(e):
        lo, hi = bounds[i], bounds[i + 1]
        if hi - lo > 8:
            want = ops_quant.quant_matmul(x[lo:hi], qweight[i], scales[i], qzeros[i], 4, 128, 0)
            err = (got[lo:hi].float() - want.float()).abs().max()
            assert float(err) <= 2e-3 * float(want.float().abs().max()), i


def test_sorted_gemm_clamps_offsets_outside_the_rows():
    """Offsets past the rows or decreasing (a caller's bug; the op cannot check device values without a sync):
    the kernel clamps each expert's rows to [0, R) and never reads or writes outside x and out."""
    gen = torch.Generator(device="cuda").manual_seed(11)
    e, k, n, rows = 8, 256, 128, 100
    qweight, scales, qzeros = random_expert_stacks(e, k, n, 4, 64, gen)
    offsets = torch.tensor([0, 30, 20, 60, 500, 500, 1000, 1000, 1000], device="cuda")
    x = torch.randn(rows, k, device="cuda", generator=gen).half()
    got = ops_quant.quant_moe_gemm(x, offsets, qweight, scales, qzeros, 4, 64, 0)
    torch.cuda.synchronize()
    want = torch.zeros(rows, n, device="cuda")
    for i, (lo, hi) in enumerate([(0, 30), (30, 30), (20, 60), (60, 100)]):
        if hi > lo:
            want[lo:hi] = x[lo:hi].float() @ rq.dequantize(qweight[i], scales[i], qzeros[i], 4, 64, 0)
    rows_ok = torch.ones(rows, dtype=torch.bool)
    rows_ok[20:30] = False  # written by experts 0 and 2 (overlapping): either
    assert float((got[rows_ok].float() - want[rows_ok]).norm() / want[rows_ok].norm()) < 5e-3


def routed_sort(tokens: int, top_k: int, e: int, gen: torch.Generator, past: int = 0):
    """The engine's sort of a routing (QuantizedExperts.sorted_gemm): ``order`` of the flat (token, slot) rows by
    expert id and the experts' row ``offsets``; ``past`` rows get the id ``e`` (past the stacks: sorted last, outside
    every expert's rows)."""
    ids = torch.randint(0, e, (tokens, top_k), generator=gen, device="cuda")
    ids.view(-1)[torch.randperm(ids.numel(), generator=gen, device="cuda")[:past]] = e
    sorted_ids, order = torch.sort(ids.reshape(-1).to(torch.int16), stable=True)
    offsets = torch.searchsorted(sorted_ids, torch.arange(e + 1, device="cuda", dtype=torch.int16))
    return order, offsets


@pytest.mark.parametrize(("bits", "tokens", "past"), [(4, 40, 0), (4, 700, 13), (8, 300, 5)])
def test_sorted_gemm_gathers_each_rows_token(bits, tokens, past):
    """x_rows = the sort's order, x_row_div = top_k: sorted row r multiplies token order[r] // top_k of the unsorted
    x, as the gathered x[order // top_k] did; the rows routed past the stacks are zeros."""
    gen = torch.Generator(device="cuda").manual_seed(bits + tokens)
    e, k, n, top_k = 24, 512, 384, 6
    qweight, scales, qzeros = random_expert_stacks(e, k, n, bits, 64, gen)
    order, offsets = routed_sort(tokens, top_k, e, gen, past)
    x = torch.randn(tokens, k, device="cuda", generator=gen).half()
    poison_allocator()
    got = ops_quant.quant_moe_gemm(x, offsets, qweight, scales, qzeros, bits, 64, 0, x_rows=order, x_row_div=top_k)
    assert_close(got, x[order // top_k], offsets, qweight, scales, qzeros, bits, 64, 0)
    assert bool((got[order.numel() - past:] == 0).all())


@pytest.mark.parametrize(("e", "k", "n"), [(257, 512, 2048), (128, 768, 2048), (16, 96, 256)])
def test_sorted_gemm_scatters_to_the_routed_order(e, k, n):
    """The down projection's call (out_rows = the sort's order): row r's result at row order[r] - the routed (token,
    slot) order the weighted sum reads - with zeros at the rows routed past the stacks. Qwen3.5-35B-A3B's and
    Qwen3-30B-A3B's down shapes, and K = 96 (the wide tile only)."""
    gen = torch.Generator(device="cuda").manual_seed(e + k)
    qweight, scales, qzeros = random_expert_stacks(e, k, n, 4, 32, gen)
    tokens, top_k, past = 300, 8, 9
    order, offsets = routed_sort(tokens, top_k, e, gen, past)
    a = torch.randn(order.numel(), k, device="cuda", generator=gen).half()
    poison_allocator()
    got = ops_quant.quant_moe_gemm(a, offsets, qweight, scales, qzeros, 4, 32, 0, out_rows=order)
    assert got.shape == (order.numel(), n)
    assert_close(got[order], a, offsets, qweight, scales, qzeros, 4, 32, 0)
    assert bool((got[order[order.numel() - past:]] == 0).all())


def test_sorted_gemm_the_engines_two_calls():
    """gate/up with the gather and the SiLU-and-mul epilogue, then down with the scatter, against the chain they
    replace (gather, GEMM, silu_and_mul, GEMM, putting the rows back): bit for bit."""
    gen = torch.Generator(device="cuda").manual_seed(21)
    e, hidden, inter, tokens, top_k = 64, 1024, 256, 500, 8
    gu = random_expert_stacks(e, hidden, 2 * inter, 4, 128, gen)
    dn = random_expert_stacks(e, inter, hidden, 4, 128, gen)
    order, offsets = routed_sort(tokens, top_k, e, gen)
    x = torch.randn(tokens, hidden, device="cuda", generator=gen).half()
    h = ops_quant.quant_moe_gemm(x, offsets, *gu, 4, 128, 0, x_rows=order, x_row_div=top_k, silu=True)
    y = ops_quant.quant_moe_gemm(h, offsets, *dn, 4, 128, 0, out_rows=order)
    h0 = silu_and_mul(ops_quant.quant_moe_gemm(x[order // top_k], offsets, *gu, 4, 128, 0))
    torch.testing.assert_close(h, h0, rtol=0, atol=0)
    y0 = ops_quant.quant_moe_gemm(h0, offsets, *dn, 4, 128, 0)
    want = torch.empty_like(y0)
    want[order] = y0
    torch.testing.assert_close(y, want, rtol=0, atol=0)


@pytest.mark.parametrize(("bits", "e", "k", "inter", "rows", "past"), [
    (4, 257, 2048, 512, 3000, 17),  # Qwen3.5-35B-A3B gate/up
    (4, 128, 2048, 768, 700, 0),  # Qwen3-30B-A3B gate/up
    (4, 16, 256, 200, 400, 5),  # N / 2 = 200: the last block's gate and up halves are partly past the columns
    (8, 24, 512, 136, 300, 3),  # int8, N / 2 = 136
    (4, 8, 96, 64, 100, 1),  # K = 96: the wide tile only
])
def test_sorted_gemm_silu_epilogue(bits, e, k, inter, rows, past):
    """silu=True: W's columns are [gate, up] and the kernel writes silu(gate) * up of its fp16-rounded results, [R, N /
    2] - bit for bit the GEMM followed by revolta::silu_and_mul - with zeros for the rows past the last offset."""
    gen = torch.Generator(device="cuda").manual_seed(bits + e + k + inter)
    qweight, scales, qzeros = random_expert_stacks(e, k, 2 * inter, bits, 32, gen)
    offsets = skewed_offsets(e, rows - past, gen)
    x = torch.randn(rows, k, device="cuda", generator=gen).half()
    poison_allocator()
    got = ops_quant.quant_moe_gemm(x, offsets, qweight, scales, qzeros, bits, 32, 0, silu=True)
    plain = ops_quant.quant_moe_gemm(x, offsets, qweight, scales, qzeros, bits, 32, 0)
    assert_close(plain, x, offsets, qweight, scales, qzeros, bits, 32, 0)
    assert got.shape == (rows, inter)
    torch.testing.assert_close(got, silu_and_mul(plain), rtol=0, atol=0)
    assert bool((got[rows - past:] == 0).all())


def test_sorted_gemm_zeros_rows_before_the_first_offset():
    """Rows before offsets[0] (ids below 0 sort first) belong to no expert: zeros, like the rows past offsets[E]."""
    gen = torch.Generator(device="cuda").manual_seed(4)
    e, k, n, rows = 8, 256, 256, 400
    qweight, scales, qzeros = random_expert_stacks(e, k, n, 4, 64, gen)
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64, device="cuda"), skewed_offsets(e, rows - 90, gen)[1:]]) + 70
    x = torch.randn(rows, k, device="cuda", generator=gen).half()
    poison_allocator()
    got = ops_quant.quant_moe_gemm(x, offsets, qweight, scales, qzeros, 4, 64, 0)
    assert bool((got[:70] == 0).all()) and bool((got[rows - 20:] == 0).all())
    assert_close(got[70:rows - 20], x[70:rows - 20], offsets - 70, qweight, scales, qzeros, 4, 64, 0)


def test_sorted_gemm_indices_out_of_range():
    """A gather index outside x reads a zero row and a scatter index outside out is not written (a caller's bug the
    op cannot see without a host sync): no read or write outside the tensors, the other rows exact."""
    gen = torch.Generator(device="cuda").manual_seed(9)
    e, k, n, tokens, top_k = 8, 256, 128, 50, 2
    qweight, scales, qzeros = random_expert_stacks(e, k, n, 4, 64, gen)
    order, offsets = routed_sort(tokens, top_k, e, gen)
    x = torch.randn(tokens, k, device="cuda", generator=gen).half()
    bad_in = order.clone()
    bad_in[3], bad_in[40] = 10**9, -1  # -1 // 2 must not become row 0
    got = ops_quant.quant_moe_gemm(x, offsets, qweight, scales, qzeros, 4, 64, 0, x_rows=bad_in, x_row_div=top_k)
    torch.cuda.synchronize()
    want = ops_quant.quant_moe_gemm(x, offsets, qweight, scales, qzeros, 4, 64, 0, x_rows=order, x_row_div=top_k)
    keep = torch.ones(order.numel(), dtype=torch.bool, device="cuda")
    keep[[3, 40]] = False
    assert bool((got[~keep] == 0).all())
    torch.testing.assert_close(got[keep], want[keep], rtol=0, atol=0)
    bad_out = torch.arange(order.numel(), device="cuda")
    bad_out[7] = order.numel()
    out = ops_quant.quant_moe_gemm(x[order // top_k], offsets, qweight, scales, qzeros, 4, 64, 0, out_rows=bad_out)
    torch.cuda.synchronize()
    keep = torch.ones(order.numel(), dtype=torch.bool, device="cuda")
    keep[7] = False
    plain = ops_quant.quant_moe_gemm(x[order // top_k], offsets, qweight, scales, qzeros, 4, 64, 0)
    torch.testing.assert_close(out[keep], plain[keep], rtol=0, atol=0)
