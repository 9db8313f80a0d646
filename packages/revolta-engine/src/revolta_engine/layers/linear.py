"""Linear layers. Weights are stored ``[out_features, in_features]`` like torch and HF."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Linear(nn.Module):
    """A dense linear layer whose parameters the loader fills in place."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False) -> None:
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.weight = nn.Parameter(torch.empty(out_features, in_features), requires_grad=False)
        self.bias = nn.Parameter(torch.empty(out_features), requires_grad=False) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)


class MergedLinear(Linear):
    """Several projections of the same input stacked on the output dimension (q/k/v, gate/up).

    ``shard_sizes`` are the output sizes of the parts in order; the loader writes part ``i`` with
    :meth:`load_shard`.
    """

    def __init__(self, in_features: int, shard_sizes: list[int], bias: bool = False) -> None:
        super().__init__(in_features, sum(shard_sizes), bias)
        self.shard_sizes = shard_sizes
        self.shard_offsets = [sum(shard_sizes[:i]) for i in range(len(shard_sizes))]

    def load_shard(self, index: int, param_name: str, tensor: torch.Tensor) -> None:
        """Copy one part's weight or bias into its slice."""
        start, size = self.shard_offsets[index], self.shard_sizes[index]
        target = getattr(self, param_name)
        if tensor.shape[0] != size or tensor.shape[1:] != target.shape[1:]:
            raise ValueError(f"expected shape {(size, *target.shape[1:])}, got {tuple(tensor.shape)}")
        target.data[start:start + size].copy_(tensor)

    def split(self, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return y.split(self.shard_sizes, dim=-1)
