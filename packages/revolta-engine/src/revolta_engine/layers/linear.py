"""Linear layers. Weights are stored ``[out_features, in_features]`` like torch and HF."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

if TYPE_CHECKING:
    from revolta_engine.layers.quant import QuantLinearMethod


class Linear(nn.Module):
    """A dense linear layer whose parameters the loader fills in place.

    With a ``quant`` method the weight is held quantized (see :mod:`revolta_engine.layers.quant`) instead of
    as a dense ``weight``; the method creates, loads and applies it.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = False,
                 quant: QuantLinearMethod | None = None) -> None:
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.quant = quant
        if quant is None:
            self.weight = nn.Parameter(torch.empty(out_features, in_features), requires_grad=False)
        else:
            quant.create_weights(self, in_features, out_features)
        self.bias = nn.Parameter(torch.empty(out_features), requires_grad=False) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.quant is None:
            return F.linear(x, self.weight, self.bias)
        y = self.quant.apply(self, x)
        return y if self.bias is None else y + self.bias

    def load_quantized(self, param_name: str, tensor: torch.Tensor, start: int = 0, size: int | None = None) -> None:
        """Repack a checkpoint's quantized tensor (qweight, qzeros, scales, g_idx) into output slice ``start``."""
        assert self.quant is not None
        self.quant.load(self, param_name, tensor, start, self.out_features if size is None else size)


class MergedLinear(Linear):
    """Several projections of the same input stacked on the output dimension (q/k/v, gate/up).

    ``shard_sizes`` are the output sizes of the parts in order; the loader writes part ``i`` with
    :meth:`load_shard`.
    """

    def __init__(self, in_features: int, shard_sizes: list[int], bias: bool = False,
                 quant: QuantLinearMethod | None = None) -> None:
        super().__init__(in_features, sum(shard_sizes), bias, quant)
        self.shard_sizes = shard_sizes
        self.shard_offsets = [sum(shard_sizes[:i]) for i in range(len(shard_sizes))]

    def load_shard(self, index: int, param_name: str, tensor: torch.Tensor) -> None:
        """Copy one part's weight or bias into its slice."""
        start, size = self.shard_offsets[index], self.shard_sizes[index]
        if self.quant is not None and param_name in self.quant.param_names:
            self.load_quantized(param_name, tensor, start, size)
            return
        target = getattr(self, param_name)
        if tensor.shape[0] != size or tensor.shape[1:] != target.shape[1:]:
            raise ValueError(f"expected shape {(size, *target.shape[1:])}, got {tuple(tensor.shape)}")
        target.data[start:start + size].copy_(tensor)

    def split(self, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return y.split(self.shard_sizes, dim=-1)
