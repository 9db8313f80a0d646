"""Weight-only quantized linear layers (AWQ int4, GPTQ int4/int8) on revolta-kernels' quantized GEMM."""

from revolta_engine.layers.quant.config import QuantConfig, parse_quant_config
from revolta_engine.layers.quant.method import (
    AWQLinearMethod,
    GPTQLinearMethod,
    QuantLinearMethod,
    make_linear_method,
)

__all__ = [
    "AWQLinearMethod",
    "GPTQLinearMethod",
    "QuantConfig",
    "QuantLinearMethod",
    "make_linear_method",
    "parse_quant_config",
]
