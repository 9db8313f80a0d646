"""Quantized-weight GEMM as a torch custom op (``revolta::quant_matmul``).

The default implementation is the reference (dequantize, float32 matmul; the CPU path); the native CUDA
kernels register themselves for ``cuda`` in :mod:`revolta_kernels.native_quant` when the library is built.
The weight layout is documented in :mod:`revolta_kernels.reference.quant`. Several projections of the same
input (q/k/v, gate/up) are one call: their columns are concatenated along N.
"""

from __future__ import annotations

import torch

from revolta_kernels.reference import quant as ref_quant

LIB = "revolta"


@torch.library.custom_op(f"{LIB}::quant_matmul", mutates_args=())
def quant_matmul(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, qzeros: torch.Tensor, bits: int,
                 group_size: int, zero_offset: int) -> torch.Tensor:
    """``x[..., K] @ W[K, N]`` where ``W`` is the int4/int8 group-quantized matrix (kernel layout)."""
    return ref_quant.quant_matmul(x, qweight, scales, qzeros, bits, group_size, zero_offset)


@quant_matmul.register_fake
def _(x, qweight, scales, qzeros, bits, group_size, zero_offset):
    return x.new_empty((*x.shape[:-1], qweight.shape[1]))


@torch.library.custom_op(f"{LIB}::quant_dequantize", mutates_args=())
def quant_dequantize(qweight: torch.Tensor, scales: torch.Tensor, qzeros: torch.Tensor, bits: int,
                     group_size: int, zero_offset: int) -> torch.Tensor:
    """The dense ``[K, N]`` weight in ``scales``' dtype (for checks and for layers that need it dense)."""
    return ref_quant.dequantize(qweight, scales, qzeros, bits, group_size, zero_offset).to(scales.dtype)


@quant_dequantize.register_fake
def _(qweight, scales, qzeros, bits, group_size, zero_offset):
    return scales.new_empty((qweight.shape[0] * (32 // bits), qweight.shape[1]))
