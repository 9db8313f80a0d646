"""Skinny fp16 GEMV (``revolta::dense_linear``) and the fused SiLU-and-mul quantized down projection
(``revolta::quant_matmul_silu``) against their references on the GPU, with programmatic dependent launch as the
process has it (on by default on sm_90+).

Bounds (elementwise): dense: |native - ref| <= 1e-3 * (|x| @ |W|^T) + 2e-3 * |ref| (fp32 products and sums,
fp16 output) and relative L2 error <= 2e-3; quantized: the bound of
test_quant_gpu.py. Outputs are poisoned (NaN in the allocator) before each call. Chains of dependent launches
(each output feeding the next, split-K workspaces shared) check the PDL ordering, eagerly and in CUDA graphs.
"""

from __future__ import annotations

import pytest
import torch
from kernels_cases import NATIVE_GPU, poison, random_quant_weight

from revolta_kernels import native_dense, ops, ops_quant, tuning
from revolta_kernels.reference import quant as rq
from revolta_kernels.reference.activation import silu_and_mul as ref_silu_and_mul

pytestmark = NATIVE_GPU


def dense_case(m: int, k: int, n: int, seed: int):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    w = (torch.randn(n, k, device="cuda", generator=gen) * 0.05).half()
    x = torch.randn(m, k, device="cuda", generator=gen).half()
    return x, w


def assert_dense_close(got, x, w):
    ref = x.float() @ w.float().t()
    bound = 1e-3 * (x.float().abs() @ w.float().abs().t()) + 2e-3 * ref.abs()
    err = (got.float() - ref).abs()
    assert got.dtype == torch.float16 and got.shape == ref.shape
    assert bool(torch.isfinite(got).all())
    assert bool((err <= bound).all()), f"max excess {float((err - bound).max())}"
    assert float(torch.linalg.norm(got.float() - ref) / torch.linalg.norm(ref)) < 2e-3


DENSE_SHAPES = [  # (K, N): Llama-8B projections, then odd sizes (K not a multiple of 256, tiny N, N % 8 != 0)
    (4096, 6144), (4096, 4096), (4096, 28672), (14336, 4096), (5120, 1000),
    (8, 1), (264, 3), (4104, 7), (1032, 1001), (2048, 13), (768, 4100),
]


@pytest.mark.parametrize("m", [1, 2, 3, 4, 5, 8])
@pytest.mark.parametrize(("k", "n"), DENSE_SHAPES)
def test_dense_gemv_matches_reference(k, n, m):
    x, w = dense_case(m, k, n, seed=k + n + m)
    assert native_dense.dense_supports(x, w)
    poison(m * n)
    got = ops_quant.dense_linear(x, w)
    assert_dense_close(got, x, w)


def test_dense_gemv_leading_dims_unaligned_and_fallbacks():
    x, w = dense_case(6, 512, 96, seed=1)
    big = torch.randn(6 * 512 + 1, device="cuda").half()
    x_off = big[1:].view(6, 512)
    x_off.copy_(x)
    got = ops_quant.dense_linear(x_off.view(2, 3, 512), w)
    assert_dense_close(got.view(6, 96), x, w)
    # More than 8 rows, fp32, non-contiguous weights: F.linear runs (same function).
    x9, w9 = dense_case(9, 512, 96, seed=2)
    assert not native_dense.dense_supports(x9, w9)
    assert_dense_close(ops_quant.dense_linear(x9, w9), x9, w9)
    wt = w.t().contiguous().t()
    assert not native_dense.dense_supports(x, wt)
    torch.testing.assert_close(ops_quant.dense_linear(x.float(), w.float()), x.float() @ w.float().t())


@pytest.mark.parametrize(("warps", "rows"), [(4, 4), (4, 8), (8, 4), (8, 8)])
@pytest.mark.parametrize(("m", "k", "n"), [(1, 4096, 4096), (2, 14336, 4096), (4, 264, 1001), (8, 4104, 7),
                                           (3, 2048, 6144)])
def test_dense_gemv_block_shapes(warps, rows, m, k, n):
    try:
        tuning.dense_tune(warps, rows)
        assert tuning.dense_plan(m) == {"warps": warps, "rows_per_block": 4 if m > 4 else rows}
        x, w = dense_case(m, k, n, seed=warps * rows + m)
        poison(m * n)
        assert_dense_close(ops_quant.dense_linear(x, w), x, w)
    finally:
        tuning.dense_tune()


@pytest.mark.parametrize("prefetch_kb", [0, 64, -1])
def test_quant_prefetch_settings(prefetch_kb):
    try:
        tuning.quant_tune(gemv_prefetch_kb=prefetch_kb)
        for m, k, n in ((1, 4096, 4096), (3, 14336, 4096), (8, 4096, 6144)):
            check_quant(m, k, n, 4, 128, 0, silu=False, seed=m + 1)
    finally:
        tuning.quant_tune()


def quant_case(m: int, k: int, n: int, bits: int, group: int, silu: bool, seed: int):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    qweight, scales, qzeros = random_quant_weight(k, n, bits, group, gen)
    x = torch.randn(m, 2 * k if silu else k, device="cuda", generator=gen).half()
    return x, qweight, scales, qzeros


def assert_quant_close(got, x, qweight, scales, qzeros, bits, group, offset, silu):
    a = (ref_silu_and_mul(x) if silu else x).float()
    w = rq.dequantize(qweight, scales, qzeros, bits, group, offset)
    ref = a @ w
    bound = 2e-3 * (a.abs() @ w.abs()) + 2e-3 * ref.abs()
    err = (got.float() - ref).abs()
    assert got.dtype == torch.float16 and got.shape == ref.shape
    assert bool(torch.isfinite(got).all())
    assert bool((err <= bound).all()), f"max excess {float((err - bound).max())}"
    assert float(torch.linalg.norm(got.float() - ref) / torch.linalg.norm(ref)) < 5e-3


def check_quant(m, k, n, bits, group, offset, silu, seed):
    x, qweight, scales, qzeros = quant_case(m, k, n, bits, group, silu, seed)
    poison(m * n)
    op = ops_quant.quant_matmul_silu if silu else ops_quant.quant_matmul
    got = op(x, qweight, scales, qzeros, bits, group, offset)
    assert_quant_close(got, x, qweight, scales, qzeros, bits, group, offset, silu)


@pytest.mark.parametrize("m", [1, 2, 3, 5, 8, 9, 40])
@pytest.mark.parametrize(("k", "n", "bits", "group", "offset"), [
    (14336, 4096, 4, 128, 0), (27648, 5120, 4, 128, 0), (4096, 4096, 4, 128, 0), (4096, 14336, 4, 32, 1),
    (14336, 4096, 8, 128, 1), (96, 200, 4, 32, 0), (160, 40, 8, 32, 1), (4096, 136, 4, 4096, 0),
])
def test_quant_matmul_silu_matches_reference(k, n, bits, group, offset, m):
    check_quant(m, k, n, bits, group, offset, silu=True, seed=m + k + n)


@pytest.mark.parametrize(("share", "prefetch_kb"), [(1, 0), (2, 0), (2, 4096), (1, 65536)])
@pytest.mark.parametrize(("m", "k", "n", "silu"), [(1, 4096, 4096, False), (1, 14336, 4096, True), (2, 4096, 6144, False),
                                                   (8, 4096, 14336, True), (1, 5120, 27648, False)])
def test_quant_split_plans(share, prefetch_kb, m, k, n, silu):
    try:
        tuning.quant_tune(gemv_prefetch_kb=prefetch_kb, gemv_share=share)
        check_quant(m, k, n, 4, 128, 0, silu=silu, seed=share + m + k)
    finally:
        tuning.quant_tune()


def test_quant_silu_unaligned_and_leading_dims():
    x, qweight, scales, qzeros = quant_case(4, 256, 64, 4, 32, True, seed=3)
    big = torch.randn(4 * 512 + 1, device="cuda").half()
    x_off = big[1:].view(4, 512)
    x_off.copy_(x)
    got = ops_quant.quant_matmul_silu(x_off.view(2, 2, 512), qweight, scales, qzeros, 4, 32, 0)
    assert_quant_close(got.view(4, 64), x, qweight, scales, qzeros, 4, 32, 0, True)


def _chain(xs0, layers):
    """A decode-like chain: dense qkv-ish -> quant (split-K) -> dense -> gate_up -> silu + down, repeated."""
    h = xs0
    for dense_w, (qw, s, qz), gate_up_w, down_w, (dqw, ds, dqz) in layers:
        h = ops_quant.dense_linear(h, dense_w)                   # [m, 4096] -> [m, 2048]
        h = ops_quant.quant_matmul(h, qw, s, qz, 4, 128, 0)      # [m, 2048] -> [m, 4096] (split-K)
        g = ops_quant.dense_linear(h, gate_up_w)                 # [m, 4096] -> [m, 2 * 1024]
        h = ops_quant.dense_linear(ops.silu_and_mul(g), down_w)  # [m, 4096]
        g = ops_quant.quant_matmul(h, dqw, ds, dqz, 4, 128, 0)   # [m, 4096] -> [m, 2 * 2048]
        h = ops_quant.quant_matmul_silu(g, qw, s, qz, 4, 128, 0)  # fused silu, split-K -> [m, 4096]
        h = (h.float() / h.float().abs().amax(-1, keepdim=True).clamp(min=1e-3)).half()  # keep values O(1)
    return h


def _chain_reference(x0, layers):
    h = x0.float()
    for dense_w, (qw, s, qz), gate_up_w, down_w, (dqw, ds, dqz) in layers:
        h = (h.half().float() @ dense_w.float().t()).half()
        h = rq.quant_matmul(h.float(), qw, s.float(), qz, 4, 128, 0).half()
        g = (h.float() @ gate_up_w.float().t()).half()
        h = (ref_silu_and_mul(g).float() @ down_w.float().t()).half()
        g = rq.quant_matmul(h.float(), dqw, ds.float(), dqz, 4, 128, 0).half()
        h = rq.quant_matmul(ref_silu_and_mul(g).float(), qw, s.float(), qz, 4, 128, 0).half()
        h = (h.float() / h.float().abs().amax(-1, keepdim=True).clamp(min=1e-3)).half()
    return h.float()


def _layers(n_layers: int, seed: int):
    gen = torch.Generator(device="cuda").manual_seed(seed)

    def quant(k, n):
        # Nibbles uniform in [0, 15] around zero point 8 (std ~4.6): scales ~1 / (4.6 sqrt(K)) keep the
        # outputs O(1) through the chain (no fp16 overflow).
        qw = torch.randint(-(2**31), 2**31 - 1, (k // 8, n), dtype=torch.int32, device="cuda", generator=gen)
        qz = torch.full((k // 128, n // 8), 0x88888888 - 2**32, dtype=torch.int32, device="cuda")  # zero 8
        s = ((torch.rand(k // 128, n, device="cuda", generator=gen) * 0.2 + 0.9) / (4.6 * k**0.5)).half()
        return qw, s, qz

    def dense(n, k):
        return (torch.randn(n, k, device="cuda", generator=gen) / k**0.5).half()

    return [(dense(2048, 4096), quant(2048, 4096), dense(2048, 4096), dense(4096, 1024), quant(4096, 4096))
            for _ in range(n_layers)]


@pytest.mark.parametrize("m", [1, 4])
def test_dependent_chain_eager_and_graph(m):
    layers = _layers(3, seed=m)
    x0 = torch.randn(m, 4096, device="cuda").half()
    ref = _chain_reference(x0, layers)

    def close(got):
        err = float(torch.linalg.norm(got.float() - ref) / torch.linalg.norm(ref))
        assert bool(torch.isfinite(got).all()) and err < 2e-2, err

    close(_chain(x0, layers))  # eager, also warms the split-K workspace
    x = x0.clone()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = _chain(x, layers)
    for _ in range(3):
        out.fill_(float("nan"))
        graph.replay()
        close(out)
    x.copy_(torch.randn_like(x0, dtype=torch.float32).half())
    ref = _chain_reference(x, layers)
    graph.replay()
    close(out)
