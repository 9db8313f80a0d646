"""Linear's decode paths: the skinny fp16 GEMV and the fused SiLU-and-mul down projection equal the plain
composition (CPU: the composition itself runs; GPU: the native kernels against cuBLAS / the unfused ops)."""

from __future__ import annotations

import pytest
import torch
from quant_layers import random_awq_linear

from revolta_engine.layers import linear as linear_mod
from revolta_engine.layers.linear import Linear
from revolta_kernels import ops


def _dense(k: int, n: int, device: str, dtype: torch.dtype) -> Linear:
    layer = Linear(k, n)
    layer.weight.data = (torch.randn(n, k, generator=torch.Generator().manual_seed(k + n)) * 0.05).to(device, dtype)
    return layer


def test_forward_silu_on_cpu_is_the_composition():
    layer = _dense(64, 24, "cpu", torch.float32)
    x = torch.randn(3, 128)
    assert not layer.fuses_silu(x)
    torch.testing.assert_close(layer.forward_silu(x), layer(ops.silu_and_mul(x)))
    torch.testing.assert_close(linear_mod.dense_matmul(x[:, :64], layer.weight), layer(x[:, :64]))


def test_quant_forward_silu_on_cpu_is_the_composition():
    layer = random_awq_linear(256, 64, "cpu", "mlp.down_proj")
    x = torch.randn(2, 512)
    torch.testing.assert_close(layer.forward_silu(x), layer(ops.silu_and_mul(x)))


gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("m", [1, 3, 8, 9])
def test_cuda_dense_paths_match_cublas(m):
    layer = _dense(4096, 1536, "cuda", torch.float16)
    x = torch.randn(m, 4096, device="cuda").half()
    ref = torch.nn.functional.linear(x, layer.weight)
    torch.testing.assert_close(layer(x), ref, rtol=5e-3, atol=5e-3)
    g = torch.randn(m, 8192, device="cuda").half()
    down = _dense(4096, 1024, "cuda", torch.float16)
    assert not down.fuses_silu(g)  # fp16 weights: the separate silu_and_mul kernel, then the GEMV
    torch.testing.assert_close(linear_mod.dense_matmul(x, layer.weight), ref, rtol=5e-3, atol=5e-3)
    torch.testing.assert_close(down.forward_silu(g), torch.nn.functional.linear(ops.silu_and_mul(g), down.weight),
                               rtol=5e-3, atol=5e-3)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("m", [1, 5, 8, 12])
def test_cuda_quant_forward_silu_matches_unfused(m):
    layer = random_awq_linear(4096, 1024, "cuda", "mlp.down_proj")
    g = torch.randn(m, 8192, device="cuda").half()
    torch.testing.assert_close(layer.forward_silu(g), layer(ops.silu_and_mul(g)), rtol=5e-3, atol=5e-3)


def _addnorm(m: int, k: int, device: str, dtype: torch.dtype, residual: bool, zero_centered: bool):
    from revolta_engine.layers.norm import AddNorm, RMSNorm

    gen = torch.Generator().manual_seed(m + k)
    norm = RMSNorm(k, 1e-6, zero_centered)
    norm.weight.data = (torch.randn(k, generator=gen) * 0.1 + (0.0 if zero_centered else 1.0)).to(device, dtype)
    x = torch.randn(m, k, generator=gen).to(device, dtype)
    res = torch.randn(m, k, generator=gen).to(device, dtype) if residual else None
    return AddNorm(x, res, norm)


@pytest.mark.parametrize(("residual", "zero_centered"), [(True, False), (False, True)])
def test_prenorm_on_cpu_is_the_composition(residual, zero_centered):
    layer = _dense(64, 24, "cpu", torch.float32)
    inp = _addnorm(2, 64, "cpu", torch.float32, residual, zero_centered)
    assert not layer.fuses_norm(inp) and not linear_mod._dense_fuses_norm(inp, layer.weight)
    normed, h = inp.run()
    y, h2 = layer.forward_prenorm(inp)
    torch.testing.assert_close(y, layer(normed))
    torch.testing.assert_close(h2, h)


@pytest.mark.parametrize(("residual", "zero_centered"), [(True, False), (True, True), (False, False)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_dense_prenorm_op_reference_on_cpu(residual, zero_centered, dtype):
    """The fused op's reference (what _dense_prenorm runs where no kernel is registered) = the unfused path."""
    layer = _dense(64, 24, "cpu", dtype)
    inp = _addnorm(3, 64, "cpu", dtype, residual, zero_centered)
    y, h = linear_mod._dense_prenorm(inp, layer.weight)
    normed, ref_h = inp.run()
    assert torch.equal(h, ref_h) and (residual or h.data_ptr() != inp.x.data_ptr())
    torch.testing.assert_close(y, torch.nn.functional.linear(normed, layer.weight), rtol=2e-3, atol=2e-3)


def test_dense_prenorm_op_schema_and_fake():
    from revolta_kernels import ops_quant

    inp = _addnorm(2, 64, "cpu", torch.float32, True, True)
    w = torch.randn(24, 64)
    torch.library.opcheck(ops_quant.dense_linear_add_rms_norm, (inp.x, inp.residual, inp.norm.weight, 1e-6, True, w))
    torch.library.opcheck(ops_quant.dense_linear_add_rms_norm, (inp.x, None, inp.norm.weight, 1e-6, False, w))


def test_dense_fuses_norm_rule_without_a_gpu(monkeypatch):
    """The rule's norm conditions on CPU tensors that claim to be CUDA (the GEMV rule itself stubbed)."""
    from types import SimpleNamespace

    from revolta_engine.layers.norm import AddNorm

    monkeypatch.setattr(linear_mod, "_uses_dense_gemv", lambda x, w: linear_mod._rows(x) <= linear_mod.DENSE_GEMV_MAX_M)
    w = torch.empty(24, 64, dtype=torch.float16)

    class FakeCuda(torch.Tensor):
        is_cuda = True

    def t(*shape, dtype=torch.float16):
        return torch.zeros(*shape, dtype=dtype).as_subclass(FakeCuda)

    def norm(dtype=torch.float16, k=64):
        return SimpleNamespace(weight=t(k, dtype=dtype), eps=1e-6, zero_centered=False)

    assert linear_mod._dense_fuses_norm(AddNorm(t(1, 64), t(1, 64), norm()), w)
    assert linear_mod._dense_fuses_norm(AddNorm(t(1, 64), None, norm()), w)
    assert not linear_mod._dense_fuses_norm(AddNorm(t(2, 64), None, norm()), w)  # one row only (H200 rule)
    assert not linear_mod._dense_fuses_norm(AddNorm(t(1, 64), t(1, 64, dtype=torch.float32), norm()), w)
    assert not linear_mod._dense_fuses_norm(AddNorm(t(1, 64), t(2, 64), norm()), w)
    assert not linear_mod._dense_fuses_norm(AddNorm(t(linear_mod.DENSE_GEMV_MAX_M + 1, 64), None, norm()), w)
    assert not linear_mod._dense_fuses_norm(AddNorm(t(1, 64), t(1, 64), norm(torch.float32)), w)
    assert not linear_mod._dense_fuses_norm(AddNorm(t(1, 64), t(1, 64), norm(k=32)), w)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("m", [1, 2, 3, 9])
@pytest.mark.parametrize(("residual", "zero_centered"), [(True, False), (True, True), (False, True)])
def test_cuda_prenorm_matches_unfused(m, residual, zero_centered):
    layer = _dense(4096, 1536, "cuda", torch.float16)
    inp = _addnorm(m, 4096, "cuda", torch.float16, residual, zero_centered)
    assert layer.fuses_norm(inp) == (m <= linear_mod.DENSE_NORM_MAX_M)
    normed, h = inp.run()
    y, h2 = layer.forward_prenorm(inp)
    assert torch.equal(h2, h)
    torch.testing.assert_close(y, torch.nn.functional.linear(normed, layer.weight), rtol=5e-3, atol=5e-3)
