"""Loading HF-named tensors into a model, with strict accounting of what was and was not filled."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch import nn

from revolta_engine.errors import ModelLoadError

# (suffix in the checkpoint, suffix of our merged parameter, shard index)
StackedMapping = list[tuple[str, str, int]]


class WeightLoader:
    """Copies checkpoint tensors into a model's parameters and reports anything missing or unexpected."""

    def __init__(self, model: nn.Module, stacked: StackedMapping, skip: Callable[[str], bool] | None = None):
        self.model = model
        self.params = dict(model.named_parameters())
        self.stacked = stacked
        self.skip = skip or (lambda name: False)
        self.loaded: dict[str, set[int] | None] = {}

    def load(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        for name, tensor in weights:
            if self.skip(name):
                continue
            self._load_one(name, tensor)
        self._check_complete()
        finish_quantized_layers(self.model)

    def _load_one(self, name: str, tensor: torch.Tensor) -> None:
        for ckpt_part, merged_part, shard in self.stacked:
            if ckpt_part in name:
                target = name.replace(ckpt_part, merged_part)
                param = self._param(target, name)
                module = self.model.get_submodule(target.rsplit(".", 1)[0])
                try:
                    module.load_shard(shard, target.rsplit(".", 1)[1], tensor)  # type: ignore[operator]
                except ValueError as e:
                    raise ModelLoadError(f"tensor {name!r}: {e}") from None
                shards = self.loaded.setdefault(target, set())
                assert shards is not None
                shards.add(shard)
                del param
                return
        param = self._param(name, name)
        owner, _, attr = name.rpartition(".")
        quantized: Any = self.model.get_submodule(owner) if owner else self.model
        shard_fn = getattr(quantized, "shard_checkpoint", None)
        if shard_fn is not None:  # tensor parallelism: keep this rank's part (the whole tensor on one rank)
            try:
                tensor = shard_fn(attr, tensor)
            except ValueError as e:
                raise ModelLoadError(f"tensor {name!r}: {e}") from None
        if getattr(quantized, "quant", None) is not None and attr in quantized.quant.param_names:
            try:
                quantized.load_quantized(attr, tensor)
            except ValueError as e:
                raise ModelLoadError(f"tensor {name!r}: {e}") from None
            self.loaded[name] = None
            return
        if param.shape != tensor.shape:
            raise ModelLoadError(
                f"tensor {name!r} has shape {tuple(tensor.shape)} but the model expects {tuple(param.shape)}"
            )
        param.data.copy_(tensor)
        self.loaded[name] = None

    def _param(self, target: str, ckpt_name: str) -> nn.Parameter:
        try:
            return self.params[target]
        except KeyError:
            raise ModelLoadError(f"checkpoint tensor {ckpt_name!r} has no place in the model") from None

    def _check_complete(self) -> None:
        missing = []
        for name, _param in self.params.items():
            if name not in self.loaded:
                missing.append(name)
                continue
            shards = self.loaded[name]
            if shards is not None:
                module: Any = self.model.get_submodule(name.rsplit(".", 1)[0])
                expected = len(module.shard_sizes)
                if len(shards) != expected:
                    missing.append(f"{name} (parts {sorted(set(range(expected)) - shards)})")
        if missing:
            shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
            raise ModelLoadError(f"checkpoint is missing tensor(s): {shown}")


def load_causal_lm(model: nn.Module, weights: Iterable[tuple[str, torch.Tensor]], stacked: StackedMapping,
                   loader_cls: type[WeightLoader] = WeightLoader) -> None:
    """Fill a causal LM (a :class:`~revolta_engine.layers.vocab_parallel.VocabParallelHead`) from HF-named tensors;
    raise naming anything missing or misshapen. Rotary caches are skipped, and ``lm_head.weight`` too when the
    head is tied to the embedding."""
    def skip(name: str) -> bool:
        return "rotary_emb.inv_freq" in name or (bool(model.tie_word_embeddings) and name == "lm_head.weight")

    def renamed() -> Iterator[tuple[str, torch.Tensor]]:
        for name, tensor in weights:
            yield ("lm_head" if name == "lm_head.weight" else name), tensor

    loader_cls(model, stacked, skip).load(renamed())


def finish_quantized_layers(model: nn.Module) -> None:
    """Once every tensor is loaded: each quantized layer repacks what needs all of its tensors (GPTQ act-order),
    then each block with a ``finish_loading`` method (an MLP folding its down projection's input order into
    gate/up; quantized MoE experts stacking themselves) runs it, inner blocks before the blocks holding them."""
    for name, module in model.named_modules():
        quant: Any = getattr(module, "quant", None)
        if quant is None:
            continue
        try:
            quant.finish_loading(module)
        except ValueError as e:
            raise ModelLoadError(f"tensor {name + '.g_idx'!r}: {e}") from None
    for module in reversed(list(model.modules())):  # children first: a block stacking its experts sees them done
        finish = getattr(module, "finish_loading", None)
        if callable(finish):
            finish()
