"""Native quantized GEMM (skinny split-K and WMMA tensor-core kernels) against the reference on the GPU.

Bound: |native - reference| <= 2e-3 * (|x| @ |W|) + 2e-3 * |reference| elementwise (fp16 dequantized weights,
fp16 pair products, fp32 accumulation, fp16 output), and relative L2 error <= 5e-3. Also: every launch-plan
variant the benchmark sweeps, CUDA-graph replay of the split-K kernel (its counters re-arm themselves),
bitwise-deterministic repeats.
"""

from __future__ import annotations

import pytest
import torch
from kernels_cases import NATIVE_GPU, random_quant_weight

from revolta_kernels import ops_quant, tuning
from revolta_kernels.reference import quant as rq

pytestmark = NATIVE_GPU


def make_case(m: int, k: int, n: int, bits: int, group: int, seed: int):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    qweight, scales, qzeros = random_quant_weight(k, n, bits, group, gen)
    x = torch.randn(m, k, device="cuda", generator=gen).half()
    return x, qweight, scales, qzeros


def assert_close_to_reference(got, x, qweight, scales, qzeros, bits, group, offset):
    m, n = x.shape[0], qweight.shape[1]
    w = rq.dequantize(qweight, scales, qzeros, bits, group, offset)
    ref = x.float() @ w
    bound = 2e-3 * (x.float().abs() @ w.abs()) + 2e-3 * ref.abs()
    err = (got.float() - ref).abs()
    assert got.dtype == torch.float16 and got.shape == (m, n)
    assert bool(torch.isfinite(got).all())
    assert bool((err <= bound).all()), f"max excess {float((err - bound).max())}"
    assert float(torch.linalg.norm(got.float() - ref) / torch.linalg.norm(ref)) < 5e-3


def check(m, k, n, bits, group, offset, seed=0):
    x, qweight, scales, qzeros = make_case(m, k, n, bits, group, seed)
    # Poison the allocator so an output element the kernel forgets to write shows up as NaN.
    torch.full((m * n * 4,), float("nan"), device="cuda")
    got = ops_quant.quant_matmul(x, qweight, scales, qzeros, bits, group, offset)
    assert_close_to_reference(got, x, qweight, scales, qzeros, bits, group, offset)


@pytest.mark.parametrize("m", [1, 2, 3, 5, 8, 9, 64, 300])
@pytest.mark.parametrize(("k", "n", "bits", "group", "offset"), [
    (4096, 14336, 4, 128, 0), (14336, 4096, 4, 128, 0), (4096, 4096, 4, 128, 0),
    (5120, 27648, 4, 128, 0), (27648, 5120, 4, 128, 0),
    (4096, 4096, 4, 32, 1), (4096, 6144, 4, 64, 1), (4096, 4096, 8, 128, 1), (14336, 4096, 8, 32, 0),
    (96, 200, 4, 32, 0), (160, 40, 8, 32, 1), (4096, 136, 4, 4096, 0),
])
def test_native_matches_reference(m, k, n, bits, group, offset):
    check(m, k, n, bits, group, offset, seed=m * 7 + k + n)


def test_leading_dims_and_unaligned_input():
    x, qweight, scales, qzeros = make_case(6, 256, 64, 4, 32, seed=1)
    big = torch.randn(6 * 256 + 1, device="cuda").half()
    x_off = big[1:].view(6, 256)  # 2-byte aligned storage: must be copied, not misread
    x_off.copy_(x)
    got = ops_quant.quant_matmul(x_off.view(2, 3, 256), qweight, scales, qzeros, 4, 32, 0)
    ref = rq.quant_matmul(x.float(), qweight, scales.float(), qzeros, 4, 32, 0).view(2, 3, 64)
    torch.testing.assert_close(got.float(), ref, rtol=5e-3, atol=5e-3)


def test_unsupported_cases_fall_back_to_the_reference():
    x, qweight, scales, qzeros = make_case(4, 64, 16, 4, 16, seed=2)  # group 16: no native kernel
    got = ops_quant.quant_matmul(x.float(), qweight, scales.float(), qzeros, 4, 16, 0)
    torch.testing.assert_close(got, rq.quant_matmul(x.float(), qweight, scales.float(), qzeros, 4, 16, 0))


@pytest.fixture
def restore_tuning():
    yield
    tuning.quant_tune()


# Every launch-plan override the benchmark sweeps must compute the same function.
@pytest.mark.parametrize("defer", [0, 1])
@pytest.mark.parametrize(("warps", "rows", "waves"), [(4, 4, 1), (4, 8, 1), (8, 4, 1), (8, 8, 1), (4, 8, 0), (8, 8, 0),
                                                      (8, 4, 0), (8, 8, 3)])
@pytest.mark.parametrize(("m", "k", "n", "bits", "group"), [
    (1, 4096, 4096, 4, 128), (3, 14336, 1024, 4, 128), (8, 2048, 6144, 4, 64), (2, 4096, 512, 8, 128),
    (1, 1024, 136, 4, 32), (5, 27648, 5120, 4, 128), (1, 5120, 27648, 4, 128),
])
def test_skinny_variants(restore_tuning, defer, warps, rows, waves, m, k, n, bits, group):
    tuning.quant_tune(warps, rows, waves, gemv_defer=defer)
    check(m, k, n, bits, group, defer, seed=warps + rows + waves + m)


@pytest.mark.parametrize("defer", [0, 1])
def test_large_activations_stay_finite(restore_tuning, defer):
    # The deferred-scale path sums (q - z) * x / 128 in fp16: activations near the fp16 limit must not overflow.
    tuning.quant_tune(gemv_defer=defer)
    x, qweight, scales, qzeros = make_case(2, 4096, 1024, 4, 128, seed=9)
    x[:, ::97] = 30000.0
    x[1, 5::331] = -60000.0
    scales.mul_(0.1)
    got = ops_quant.quant_matmul(x, qweight, scales, qzeros, 4, 128, 0)
    assert_close_to_reference(got, x, qweight, scales, qzeros, 4, 128, 0)


@pytest.mark.parametrize("variant", [0, 1, 2, 3, 4])
@pytest.mark.parametrize(("m", "k", "n", "bits", "group"), [
    (300, 4096, 1024, 4, 128), (64, 1024, 520, 8, 32), (9, 512, 2048, 4, 32), (513, 256, 384, 4, 64),
])
def test_gemm_variants(restore_tuning, variant, m, k, n, bits, group):
    tuning.quant_tune(gemm_variant=variant)
    assert tuning.quant_plan(m, n, k, bits, group, torch.device("cuda"))["variant"] == variant
    check(m, k, n, bits, group, 1, seed=variant + m)


def test_split_k_under_cuda_graph_replay():
    # Split-K arrival counters must re-arm themselves: replay the captured call on new inputs many times.
    x, qweight, scales, qzeros = make_case(1, 14336, 4096, 4, 128, seed=5)
    assert tuning.quant_plan(1, 4096, 14336, 4, 128, x.device)["splits"] > 1
    ops_quant.quant_matmul(x, qweight, scales, qzeros, 4, 128, 0)  # eager first: the workspace exists
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = ops_quant.quant_matmul(x, qweight, scales, qzeros, 4, 128, 0)
    for i in range(5):
        x.copy_(torch.randn_like(x, dtype=torch.float32).half() * (i + 1))
        out.fill_(float("nan"))
        graph.replay()
        assert_close_to_reference(out, x, qweight, scales, qzeros, 4, 128, 0)


def test_repeats_are_bitwise_identical_and_shapes_interleave():
    cases = [make_case(m, k, n, 4, 128, seed=m + n) for m, k, n in ((1, 4096, 4096), (4, 14336, 4096),
                                                                     (1, 4096, 28672), (8, 4096, 6144))]
    firsts = [ops_quant.quant_matmul(*c, 4, 128, 0) for c in cases]
    for _ in range(3):
        for c, first in zip(cases, firsts, strict=True):
            assert torch.equal(ops_quant.quant_matmul(*c, 4, 128, 0), first)
    for c, first in zip(cases, firsts, strict=True):
        assert_close_to_reference(first, *c, 4, 128, 0)
