"""A quantized (AWQ 4-bit, group 128) :class:`Linear` with random packed weights, for the layer tests."""

from __future__ import annotations

import torch

from revolta_engine.layers.linear import Linear
from revolta_engine.layers.quant.config import QuantConfig
from revolta_engine.layers.quant.method import make_linear_method


def random_awq_linear(k: int, n: int, device: str, prefix: str) -> Linear:
    """A ``k`` -> ``n`` AWQ layer named ``prefix`` (which picks its fusions), seeded by ``n``; fp16 scales on CUDA."""
    layer = Linear(k, n, quant=make_linear_method(QuantConfig("awq", 4, 128), prefix))
    gen = torch.Generator().manual_seed(n)
    layer.qweight.data = torch.randint(-(2**31), 2**31 - 1, layer.qweight.shape, dtype=torch.int32, generator=gen)
    layer.qzeros.data = torch.randint(-(2**31), 2**31 - 1, layer.qzeros.shape, dtype=torch.int32, generator=gen)
    layer.scales.data = torch.rand(layer.scales.shape, generator=gen) * 0.01 + 1e-3
    if device == "cuda":
        layer.to("cuda")
        layer.scales.data = layer.scales.data.half()
    return layer
