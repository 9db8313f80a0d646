"""Cutting a rank's share out of a whole checkpoint tensor.

A checkpoint tensor stores a layer's output and input features along some axes, several features per element
where values are packed (eight 4-bit columns in one int32) or grouped (one scale per 128 input channels).
:class:`FeatureAxes` says which, and :func:`narrow_features` keeps the elements of a range of features.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class FeatureAxes:
    """The axis of a tensor that runs over output features and the one over input features (None: neither),
    with how many features one element along each stands for."""

    out_axis: int | None = None
    in_axis: int | None = None
    out_per_element: int = 1
    in_per_element: int = 1


def narrow_features(tensor: torch.Tensor, axis: int | None, per_element: int, start: int, size: int,
                    name: str) -> torch.Tensor:
    """The elements of ``tensor`` along ``axis`` that hold features ``[start, start + size)``.

    An axis of one element that stands for every feature (one scale group over the whole input) is kept whole.
    Raises ValueError naming ``name`` when the range does not fall on element boundaries (a rank's share of a
    packed or grouped dimension must be whole words and whole groups).
    """
    if axis is None or (tensor.shape[axis] == 1 and per_element >= start + size):
        return tensor
    if start % per_element or size % per_element:
        raise ValueError(
            f"{name}: this rank's features {start}..{start + size - 1} do not fall on whole elements of "
            f"{per_element} features (packed words or quantization groups); use a tensor_parallel_size that "
            f"splits this layer into multiples of {per_element}")
    first, count = start // per_element, size // per_element
    if first + count > tensor.shape[axis]:
        raise ValueError(f"{name}: expected at least {(first + count) * per_element} features along axis {axis}, "
                         f"the tensor has {tensor.shape[axis]} elements of {per_element}")
    return tensor.narrow(axis, first, count)
