"""Weight loading for models with stacked expert tensors (per-expert checkpoint tensors -> one parameter)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from revolta_engine.errors import ModelLoadError
from revolta_engine.layers.moe import EXPERT_TENSOR, FusedExperts
from revolta_engine.models.weights import StackedMapping, WeightLoader


class MoeWeightLoader(WeightLoader):
    """:class:`WeightLoader` that also routes ``experts.<e>.<proj>.weight`` into :class:`FusedExperts`.

    A stacked parameter counts as loaded only once every expert's part arrived.
    """

    def __init__(self, model: nn.Module, stacked: StackedMapping, skip: Callable[[str], bool] | None = None):
        super().__init__(model, stacked, skip)
        self.expert_parts: dict[str, set[tuple[int, str]]] = {}

    def _load_one(self, name: str, tensor: torch.Tensor) -> None:
        m = EXPERT_TENSOR.match(name)
        if m is None:
            return super()._load_one(name, tensor)
        prefix, expert, proj = m.group(1), int(m.group(2)), m.group(3)
        try:
            module = self.model.get_submodule(prefix)
        except AttributeError:
            raise ModelLoadError(f"checkpoint tensor {name!r} has no place in the model") from None
        if not isinstance(module, FusedExperts):
            raise ModelLoadError(f"checkpoint tensor {name!r} has no place in the model")
        try:
            param = module.load_expert(expert, proj, tensor)
        except ValueError as e:
            raise ModelLoadError(f"tensor {name!r}: {e}") from None
        key = f"{prefix}.{param}"
        parts = self.expert_parts.setdefault(key, set())
        parts.add((expert, proj))
        per_expert = 1 if param == "down_proj" else 2
        if len(parts) == module.num_experts * per_expert:
            self.loaded[key] = None

    def _check_complete(self) -> None:
        for key, parts in self.expert_parts.items():
            if key not in self.loaded:
                module = self.model.get_submodule(key.rsplit(".", 1)[0])
                assert isinstance(module, FusedExperts)
                have = {e for e, _ in parts}
                lacking = sorted(set(range(module.num_experts)) - have) or "some gate/up parts"
                raise ModelLoadError(f"checkpoint is missing tensor(s): {key} (experts {lacking})")
        super()._check_complete()
