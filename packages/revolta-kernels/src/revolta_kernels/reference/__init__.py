"""Pure-torch reference implementations: the oracle for every native kernel and the CPU path.

Each function is written to be obviously right rather than fast: inputs are upcast to float32, the
math follows the textbook definition, and results are cast back to the caller's dtype.
"""

from revolta_kernels.reference.activation import sigmoid_gate_mul, silu_and_mul
from revolta_kernels.reference.attention import paged_attention
from revolta_kernels.reference.cache import dequantize_kv, reshape_and_cache
from revolta_kernels.reference.norm import fused_add_rms_norm, rms_norm
from revolta_kernels.reference.quant import dequantize as dequantize_quant
from revolta_kernels.reference.quant import quant_matmul
from revolta_kernels.reference.rotary import qk_norm_rotary_and_cache, rotary_and_cache, rotary_embedding

__all__ = [
    "dequantize_kv",
    "dequantize_quant",
    "fused_add_rms_norm",
    "paged_attention",
    "quant_matmul",
    "reshape_and_cache",
    "rms_norm",
    "rotary_and_cache",
    "qk_norm_rotary_and_cache",
    "rotary_embedding",
    "silu_and_mul",
    "sigmoid_gate_mul",
]
