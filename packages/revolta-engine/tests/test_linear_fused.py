"""Linear's decode paths: the skinny fp16 GEMV and the fused SiLU-and-mul down projection equal the plain
composition (CPU: the composition itself runs; GPU: the native kernels against cuBLAS / the unfused ops)."""

from __future__ import annotations

import pytest
import torch

from revolta_engine.layers import linear as linear_mod
from revolta_engine.layers.linear import Linear
from revolta_engine.layers.quant.config import QuantConfig
from revolta_engine.layers.quant.method import make_linear_method
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


def _quant_layer(k: int, n: int, device: str) -> Linear:
    config = QuantConfig("awq", 4, 128)
    layer = Linear(k, n, quant=make_linear_method(config, "mlp.down_proj"))
    gen = torch.Generator().manual_seed(n)
    layer.qweight.data = torch.randint(-(2**31), 2**31 - 1, layer.qweight.shape, dtype=torch.int32, generator=gen)
    layer.qzeros.data = torch.randint(-(2**31), 2**31 - 1, layer.qzeros.shape, dtype=torch.int32, generator=gen)
    layer.scales.data = torch.rand(layer.scales.shape, generator=gen) * 0.01 + 1e-3
    if device == "cuda":
        layer.to("cuda")
        layer.scales.data = layer.scales.data.half()
    return layer


def test_quant_forward_silu_on_cpu_is_the_composition():
    layer = _quant_layer(256, 64, "cpu")
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
    assert down.fuses_silu(g) == (m <= linear_mod.DENSE_GEMV_MAX_M and linear_mod.FUSED_SILU_DENSE)
    torch.testing.assert_close(linear_mod.dense_matmul(x, layer.weight), ref, rtol=5e-3, atol=5e-3)
    torch.testing.assert_close(down.forward_silu(g), torch.nn.functional.linear(ops.silu_and_mul(g), down.weight),
                               rtol=5e-3, atol=5e-3)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("m", [1, 5, 8, 12])
def test_cuda_quant_forward_silu_matches_unfused(m):
    layer = _quant_layer(4096, 1024, "cuda")
    g = torch.randn(m, 8192, device="cuda").half()
    torch.testing.assert_close(layer.forward_silu(g), layer(ops.silu_and_mul(g)), rtol=5e-3, atol=5e-3)
