"""Native quantized GEMM (skinny split-K and WMMA tensor-core kernels) against the reference on the GPU.

Bound: |native - reference| <= 2e-3 * (|x| @ |W|) + 2e-3 * |reference| elementwise (fp16 dequantized weights,
fp16 pair products, fp32 accumulation, fp16 output), and relative L2 error <= 5e-3.
"""

from __future__ import annotations

import pytest
import torch

import revolta_kernels
from revolta_kernels import ops_quant
from revolta_kernels.reference import quant as rq

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(not revolta_kernels.native_available(), reason=revolta_kernels.native_status()),
]


def make_case(m: int, k: int, n: int, bits: int, group: int, seed: int):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    qweight = torch.randint(-(2**31), 2**31 - 1, (k * bits // 32, n), dtype=torch.int32, device="cuda",
                            generator=gen)
    qzeros = torch.randint(-(2**31), 2**31 - 1, (k // group, n * bits // 32), dtype=torch.int32, device="cuda",
                           generator=gen)
    scales = (torch.rand(k // group, n, device="cuda", generator=gen) * 0.01 + 1e-3).half()
    x = torch.randn(m, k, device="cuda", generator=gen).half()
    return x, qweight, scales, qzeros


def check(m, k, n, bits, group, offset, seed=0):
    x, qweight, scales, qzeros = make_case(m, k, n, bits, group, seed)
    # Poison the allocator so an output element the kernel forgets to write shows up as NaN.
    torch.full((m * n * 4,), float("nan"), device="cuda")
    got = ops_quant.quant_matmul(x, qweight, scales, qzeros, bits, group, offset)
    w = rq.dequantize(qweight, scales, qzeros, bits, group, offset)
    ref = x.float() @ w
    bound = 2e-3 * (x.float().abs() @ w.abs()) + 2e-3 * ref.abs()
    err = (got.float() - ref).abs()
    assert got.dtype == torch.float16 and got.shape == (m, n)
    assert bool(torch.isfinite(got).all())
    assert bool((err <= bound).all()), f"max excess {float((err - bound).max())}"
    assert float(torch.linalg.norm(got.float() - ref) / torch.linalg.norm(ref)) < 5e-3


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
