"""CPU reference of the quantized GEMM against a float64 computation from the unpacked integers."""

from __future__ import annotations

import pytest
import torch

from revolta_kernels import ops_quant
from revolta_kernels.reference import quant as rq


def _random_case(k: int, n: int, bits: int, group: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randint(0, 1 << bits, (k, n), generator=gen)
    z = torch.randint(0, 1 << bits, (k // group, n), generator=gen)
    s = (torch.rand(k // group, n, generator=gen) * 0.02 + 0.001).half()
    return q, z, s


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("dim", [0, 1])
def test_pack_roundtrip(bits, dim):
    v = torch.randint(0, 1 << bits, (64, 32), generator=torch.Generator().manual_seed(0))
    packed = rq.pack_int32(v, bits, dim)
    assert packed.dtype == torch.int32
    assert packed.shape[dim] == v.shape[dim] * bits // 32
    assert torch.equal(rq.unpack_int32(packed, bits, dim), v.int())


def test_pack_field_order():
    # Field i of a word holds element i: bits [4i, 4i + 4).
    v = torch.arange(8).view(8, 1)
    assert int(rq.pack_int32(v, 4, 0)[0, 0]) == 0x76543210
    with pytest.raises(ValueError, match=r"\[0, 15\]"):
        rq.pack_int32(torch.full((8, 1), 16), 4, 0)


@pytest.mark.parametrize(("bits", "group", "offset"), [(4, 32, 0), (4, 64, 1), (4, 128, 0), (8, 128, 1), (8, 32, 0)])
@pytest.mark.parametrize("m", [1, 5, 33])
def test_quant_matmul_matches_float64(bits, group, offset, m):
    k, n = 256, 48
    q, z, s = _random_case(k, n, bits, group, seed=bits * group + m)
    if offset:
        z = z.clamp(max=(1 << bits) - 2)  # stored zero = zero - offset must stay in range
    qweight, qzeros = rq.pack_int32(q, bits, 0), rq.pack_int32(z, bits, 1)
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(m))
    w64 = (q.double() - (z.double() + offset).repeat_interleave(group, 0)) * s.double().repeat_interleave(group, 0)
    expected = x.double() @ w64
    got = ops_quant.quant_matmul(x, qweight, s, qzeros, bits, group, offset)
    assert got.shape == (m, n) and got.dtype == x.dtype
    # float32 accumulation over K=256 terms of size up to ~5: errors of a few 1e-6 relative to the sum of |terms|
    bound = 1e-6 * (x.double().abs() @ w64.abs())
    assert bool(((got.double() - expected).abs() <= bound).all())
    dense = ops_quant.quant_dequantize(qweight, s.float(), qzeros, bits, group, offset)
    torch.testing.assert_close(dense.double(), w64, rtol=0, atol=0)


def test_half_input_keeps_dtype_and_leading_dims():
    q, z, s = _random_case(64, 16, 4, 32, seed=3)
    x = torch.randn(2, 3, 64).half()
    y = ops_quant.quant_matmul(x, rq.pack_int32(q, 4, 0), s, rq.pack_int32(z, 4, 1), 4, 32, 0)
    assert y.shape == (2, 3, 16) and y.dtype == torch.float16


def test_inconsistent_shapes_are_rejected():
    q, z, s = _random_case(64, 16, 4, 32, seed=4)
    with pytest.raises(ValueError, match="inconsistent quantized shapes"):
        rq.dequantize(rq.pack_int32(q, 4, 0), s[:1], rq.pack_int32(z, 4, 1), 4, 32)
