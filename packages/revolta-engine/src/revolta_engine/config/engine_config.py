"""The engine's configuration as one frozen tree, resolved before anything is built (see :mod:`.resolve`).

Each part holds plain values; :class:`EngineConfig` holds the parts, the arguments they came from, every value's
source and the environment variables that were set, which together make the startup configuration report.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from revolta_engine.config.args import EngineArgs
from revolta_engine.config.offload import OffloadConfig
from revolta_engine.config.sources import ResolvedValue
from revolta_engine.config.speculative import SpeculativeConfig


@dataclass(frozen=True)
class ModelConfig:
    """The checkpoint and how its model runs: dtype, context length, weights, request defaults."""

    path: str
    served_model_name: str
    dtype: torch.dtype
    max_model_len: int
    load_format: str
    seed: int
    activation_quant: str
    enforce_eager: bool
    chat_template: str | None
    max_logprobs: int
    sampling_defaults: Mapping[str, Any] = field(default_factory=dict)  # from the generation config


@dataclass(frozen=True)
class CacheConfig:
    """The paged KV cache: block size, dtype, prefix caching and the memory budget it is sized from."""

    block_size: int
    enable_prefix_caching: bool
    kv_cache_dtype: torch.dtype
    gpu_memory_utilization: float
    kv_cache_memory_bytes: int | None  # None: what gpu_memory_utilization leaves, measured at startup
    num_gpu_blocks_override: int | None


@dataclass(frozen=True)
class SchedulerConfig:
    """The token budget and admission of one engine step."""

    max_num_seqs: int
    max_num_batched_tokens: int
    policy: str  # "fcfs" or "priority"
    async_scheduling: bool


@dataclass(frozen=True)
class ParallelConfig:
    """How the model is split over devices."""

    tensor_parallel_size: int


@dataclass(frozen=True)
class EngineConfig:
    """Everything the engine is built from, resolved and checked; ``values`` says where each came from."""

    args: EngineArgs
    device: torch.device
    model: ModelConfig
    cache: CacheConfig
    scheduler: SchedulerConfig
    parallel: ParallelConfig
    speculative: SpeculativeConfig | None
    offload: OffloadConfig | None
    values: Mapping[str, ResolvedValue]  # name -> value and source, in the order they were resolved
    env: tuple[tuple[str, str], ...] = ()  # every declared variable that was set, as (name, text)

    @property
    def num_speculative_tokens(self) -> int:
        """Draft tokens verified per step (0 without speculation)."""
        return self.speculative.num_speculative_tokens if self.speculative is not None else 0

    def report(self, measured: Mapping[str, ResolvedValue] | None = None) -> list[tuple[str, Any, str]]:
        """Every value as ``(name, value, source)``, then every set environment variable as ``(name, text, "env")``.

        ``measured``: values only known once the engine is built (the KV budget a GPU leaves), shown in place of
        the resolved ones."""
        values = {**self.values, **(measured or {})}
        return [(k, v.value, v.source) for k, v in values.items()] + [(name, text, "env") for name, text in self.env]
