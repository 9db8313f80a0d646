"""The state pool of hybrid models: per Gated DeltaNet layer, conv tails and recurrent states by slot."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from revolta_engine.forward_context import LayerStateCache


@dataclass(frozen=True)
class StateCacheSpec:
    """Shape of one slot in every Gated DeltaNet layer (recurrent state kept in float32)."""

    num_layers: int
    conv_dim: int
    conv_width: int  # kernel size - 1 inputs carried between steps
    num_v_heads: int
    head_k_dim: int
    head_v_dim: int
    conv_dtype: torch.dtype

    @property
    def bytes_per_slot(self) -> int:
        conv = self.conv_dim * self.conv_width * torch.empty((), dtype=self.conv_dtype).element_size()
        recurrent = self.num_v_heads * self.head_k_dim * self.head_v_dim * 4
        return (conv + recurrent) * self.num_layers


def allocate_state_cache(spec: StateCacheSpec, num_slots: int, device: torch.device) -> list[LayerStateCache]:
    """Zeroed pools of ``num_slots`` slots for every Gated DeltaNet layer."""
    return [
        LayerStateCache(
            torch.zeros(num_slots, spec.conv_dim, spec.conv_width, dtype=spec.conv_dtype, device=device),
            torch.zeros(num_slots, spec.num_v_heads, spec.head_k_dim, spec.head_v_dim, dtype=torch.float32,
                        device=device),
        )
        for _ in range(spec.num_layers)
    ]


def reset_slots(caches: list[LayerStateCache], slots: list[int], sources: list[int | None]) -> None:
    """Start each slot fresh (zeros) or from a snapshot slot (a prefix-cache hit)."""
    for slot, src in zip(slots, sources, strict=True):
        for layer in caches:
            if src is None:
                layer.conv[slot].zero_()
                layer.recurrent[slot].zero_()
            else:
                layer.conv[slot].copy_(layer.conv[src])
                layer.recurrent[slot].copy_(layer.recurrent[src])
