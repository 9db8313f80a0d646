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


def test_op_names_the_problem_with_its_inputs():
    """Bad calls of the op raise ValueError naming what is wrong, not a matmul shape error from inside."""
    q, z, s = _random_case(64, 16, 4, 32, seed=5)
    qw, qz = rq.pack_int32(q, 4, 0), rq.pack_int32(z, 4, 1)
    x = torch.randn(2, 64).half()
    with pytest.raises(ValueError, match="x has 72 input channels but the 4-bit qweight"):
        ops_quant.quant_matmul(torch.randn(2, 72).half(), qw, s, qz, 4, 32, 0)
    with pytest.raises(ValueError, match="bits must be one of"):
        ops_quant.quant_matmul(x, qw, s, qz, 2, 32, 0)
    with pytest.raises(ValueError, match="must be int32"):
        ops_quant.quant_matmul(x, qw.long(), s, qz, 4, 32, 0)
    with pytest.raises(ValueError, match="must be int32"):
        ops_quant.quant_dequantize(qw, s, qz.long(), 4, 32, 0)


@pytest.mark.parametrize(("bits", "group"), [(4, 32), (8, 64)])
@pytest.mark.parametrize("m", [1, 3, 8])
def test_quant_matmul_silu_reference(bits, group, m):
    # silu_and_mul(x) @ W computed in float64 from the unpacked integers (the activation rounded to x's dtype
    # first, as revolta::silu_and_mul does).
    k, n = 128, 40
    q, z, s = _random_case(k, n, bits, group, seed=m + bits)
    qweight, qzeros = rq.pack_int32(q, bits, 0), rq.pack_int32(z, bits, 1)
    x = torch.randn(m, 2 * k, generator=torch.Generator().manual_seed(m)).half()
    a = (torch.nn.functional.silu(x[:, :k].double()) * x[:, k:].double()).half().double()
    w64 = (q.double() - z.double().repeat_interleave(group, 0)) * s.double().repeat_interleave(group, 0)
    got = ops_quant.quant_matmul_silu(x.float(), qweight, s.float(), qzeros, bits, group, 0)
    assert got.shape == (m, n)
    torch.testing.assert_close(got.double(), a @ w64, rtol=2e-3, atol=2e-3 * float((a.abs() @ w64.abs()).max()))
    assert ops_quant.quant_matmul_silu(x.view(1, m, 2 * k).float(), qweight, s.float(), qzeros, bits, group,
                                       0).shape == (1, m, n)


def test_dense_linear_reference():
    gen = torch.Generator().manual_seed(3)
    k, n = 72, 33
    w = torch.randn(n, k, generator=gen)
    x = torch.randn(2, 5, k, generator=gen)
    got = ops_quant.dense_linear(x, w)
    assert got.shape == (2, 5, n)
    torch.testing.assert_close(got, x @ w.t(), rtol=1e-5, atol=1e-5)


def test_fake_impls_give_shapes():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = torch.empty(3, 256, dtype=torch.float16)
        qw, s, qz = torch.empty(16, 24, dtype=torch.int32), torch.empty(1, 24, dtype=torch.float16), torch.empty(
            1, 3, dtype=torch.int32)
        assert ops_quant.quant_matmul_silu(x, qw, s, qz, 4, 128, 0).shape == (3, 24)
        assert ops_quant.dense_linear(x, torch.empty(10, 256, dtype=torch.float16)).shape == (3, 10)
        assert ops_quant.quant_matmul(x, qw.new_empty(32, 24), s.new_empty(2, 24), qz.new_empty(2, 3), 4, 128, 0,
                                      None, True).shape == (3, 24)


@pytest.mark.parametrize("op", ["plain", "silu", "norm"])
def test_x_order_takes_the_activation_channels_in_that_order(op):
    # Act-order GPTQ: row k of W multiplies channel x_order[k] of the activation, in float64 from the integers.
    k, n, bits, group = 128, 24, 4, 32
    q, z, s = _random_case(k, n, bits, group, seed=7)
    qweight, qzeros = rq.pack_int32(q, bits, 0), rq.pack_int32(z, bits, 1)
    w64 = (q.double() - z.double().repeat_interleave(group, 0)) * s.double().repeat_interleave(group, 0)
    gen = torch.Generator().manual_seed(8)
    order = torch.randperm(k, generator=gen).to(torch.int32)
    x = torch.randn(3, 2 * k if op == "silu" else k, generator=gen)
    if op == "plain":
        got, a = ops_quant.quant_matmul(x, qweight, s.float(), qzeros, bits, group, 0, order), x.double()
    elif op == "silu":
        got = ops_quant.quant_matmul_silu(x, qweight, s.float(), qzeros, bits, group, 0, order)
        a = torch.nn.functional.silu(x[:, :k].double()) * x[:, k:].double()
    else:
        res, w = torch.randn(3, k, generator=gen), torch.rand(k, generator=gen) + 0.5
        got, h = ops_quant.quant_matmul_add_rms_norm(x, res, w, 1e-6, False, qweight, s.float(), qzeros, bits, group,
                                                     0, order)
        h64 = x.double() + res.double()
        torch.testing.assert_close(h.double(), h64)  # h stays in channel order
        a = h64 * torch.rsqrt(h64.pow(2).mean(-1, keepdim=True) + 1e-6) * w.double()
    want = a[:, order.long()] @ w64
    torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4 * float((a.abs() @ w64.abs()).max()))
    assert not torch.allclose(want, a @ w64, rtol=0.1)  # the order matters for this case


def test_x_order_of_the_wrong_size_is_rejected():
    q, z, s = _random_case(64, 8, 4, 32, seed=1)
    with pytest.raises(ValueError, match="one index per input channel"):
        ops_quant.quant_matmul(torch.randn(2, 64), rq.pack_int32(q, 4, 0), s.float(), rq.pack_int32(z, 4, 1), 4, 32,
                               0, torch.arange(32))


@pytest.mark.parametrize(("bits", "window"), [(4, 64), (8, 32)])
def test_int8_rounding_uses_one_scale_per_window(bits, window):
    """Each row's windows of 64 (int4) or 32 (int8 weights) channels round to int8 with scale amax / 127: every value
    becomes a multiple of its window's scale, the window's largest value stays exact, all-zero windows stay zero."""
    gen = torch.Generator().manual_seed(7)
    a = torch.randn(3, 4 * window + 10, generator=gen) * torch.tensor([1.0, 50.0, 1e-3]).view(3, 1)
    a[1, window:2 * window] = 0.0
    got = rq.round_activations_int8(a, bits)
    assert got.shape == a.shape and got.dtype == a.dtype
    for row in range(3):
        for start in range(0, a.shape[1], window):
            seg, out = a[row, start:start + window], got[row, start:start + window]
            scale = seg.abs().max() / 127
            if scale == 0:
                assert bool((out == 0).all())
                continue
            steps = out / scale
            torch.testing.assert_close(steps, steps.round(), rtol=0, atol=1e-4)
            assert float((out - seg).abs().max()) <= float(scale) / 2 * 1.0001
            assert float(out.abs().max()) == pytest.approx(float(seg.abs().max()), rel=1e-6)


@pytest.mark.parametrize("op", ["plain", "silu", "norm"])
def test_int8_activations_round_decode_calls_only(op):
    """``int8_activations`` changes a call of at most 8 rows to the int8-rounded activations' product and leaves
    larger calls (prefill) as they are."""
    gen = torch.Generator().manual_seed(8)
    k, n, group = 256, 48, 64
    q, z, s = _random_case(k, n, 4, group, seed=9)
    qweight, qzeros = rq.pack_int32(q, 4, 0), rq.pack_int32(z, 4, 1)
    s = s.float()
    w = rq.dequantize(qweight, s, qzeros, 4, group)
    norm_w = torch.rand(k, generator=gen) + 0.5

    def call(x, int8):
        if op == "plain":
            return ops_quant.quant_matmul(x, qweight, s, qzeros, 4, group, 0, None, int8), x
        if op == "silu":
            return (ops_quant.quant_matmul_silu(x, qweight, s, qzeros, 4, group, 0, None, False, int8),
                    torch.nn.functional.silu(x[..., :k]) * x[..., k:])
        y, _ = ops_quant.quant_matmul_add_rms_norm(x, None, norm_w, 1e-6, False, qweight, s, qzeros, 4, group, 0, None,
                                                   int8)
        return y, x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * norm_w

    for rows in (1, 8, 9):
        x = torch.randn(rows, 2 * k if op == "silu" else k, generator=gen)
        plain, a = call(x, False)
        rounded, _ = call(x, True)
        if rows > rq.INT8_ACTIVATION_MAX_ROWS:
            assert torch.equal(rounded, plain)
            continue
        torch.testing.assert_close(rounded, rq.round_activations_int8(a, 4) @ w, rtol=1e-4, atol=1e-4)
        assert not torch.equal(rounded, plain)
