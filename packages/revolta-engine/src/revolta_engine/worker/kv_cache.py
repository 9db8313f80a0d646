"""Allocation of the paged KV cache tensors for every attention layer."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from revolta_engine.errors import InvalidRequestError
from revolta_engine.forward_context import LayerKVCache

KV_CACHE_DTYPES = {
    "fp16": torch.float16, "float16": torch.float16, "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
    "fp32": torch.float32, "float32": torch.float32, "int8": torch.int8,
    "fp8": torch.float8_e4m3fn, "fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2,
}


def resolve_kv_cache_dtype(name: str, model_dtype: torch.dtype) -> torch.dtype:
    """``auto`` stores the cache in the model's dtype."""
    if name == "auto":
        return model_dtype
    try:
        return KV_CACHE_DTYPES[name]
    except KeyError:
        raise InvalidRequestError(
            f"unknown kv_cache_dtype {name!r}; choose auto, {', '.join(sorted(KV_CACHE_DTYPES))}",
            param="kv_cache_dtype",
        ) from None


@dataclass(frozen=True)
class KVCacheSpec:
    """Shape of one layer's cache and the bytes one block costs across all layers."""

    num_layers: int
    num_kv_heads: int
    head_dim: int
    block_size: int
    dtype: torch.dtype

    @property
    def bytes_per_token(self) -> int:
        elem = torch.empty((), dtype=self.dtype).element_size()
        per_layer = 2 * self.num_kv_heads * self.head_dim * elem
        if self.dtype == torch.int8:
            per_layer += 2 * self.num_kv_heads * 4  # one float32 scale per token and head, K and V
        return per_layer * self.num_layers

    @property
    def bytes_per_block(self) -> int:
        return self.bytes_per_token * self.block_size


def allocate_kv_cache(spec: KVCacheSpec, num_blocks: int, device: torch.device) -> list[LayerKVCache]:
    """Allocate ``num_blocks`` blocks for every layer (contents undefined until written)."""
    shape = (num_blocks, spec.num_kv_heads, spec.block_size, spec.head_dim)
    caches = []
    for _ in range(spec.num_layers):
        k = torch.empty(shape, dtype=spec.dtype, device=device)
        v = torch.empty(shape, dtype=spec.dtype, device=device)
        # Empty (not None) scales for unquantized caches: torch's custom-op machinery cannot mutate an
        # optional argument that is None.
        ks = vs = torch.empty(0, dtype=torch.float32, device=device)
        if spec.dtype == torch.int8:
            ks = torch.ones(shape[:3], dtype=torch.float32, device=device)
            vs = torch.ones(shape[:3], dtype=torch.float32, device=device)
        caches.append(LayerKVCache(k, v, ks, vs))
    return caches
