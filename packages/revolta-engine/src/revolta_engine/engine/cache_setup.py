"""The engine's caches at startup: the paged KV cache and, for hybrid models, the recurrent state pool."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

import torch

from revolta_engine.config.engine_config import CacheConfig
from revolta_engine.core.state_slots import StateSlots
from revolta_engine.engine.memory import plan_kv_blocks
from revolta_engine.worker.kv_cache import KVCacheSpec, allocate_kv_cache
from revolta_engine.worker.state_cache import allocate_state_cache

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class EngineCaches:
    """What :func:`allocate_caches` made: the KV layout and blocks, and the state slots and pool (hybrid)."""

    spec: KVCacheSpec
    num_blocks: int  # including the null block 0
    kv_caches: list
    state_slots: StateSlots | None
    state_caches: list
    measured_kv_bytes: int | None = None  # the KV budget measured on the GPU (None: the configuration's)

    @property
    def scratch_slot(self) -> int:
        """The first of the scratch slots past the pad slot (speculative verification's per-position states)."""
        return self.state_slots.num_slots + 1 if self.state_slots is not None else -1

    @property
    def pad_slot(self) -> int:
        """The spare state slot past the owned ones (CUDA graphs point their padding rows at it), or -1."""
        return self.state_slots.num_slots if self.state_slots is not None else -1


def allocate_caches(model: Any, spec: KVCacheSpec, device: torch.device, cache: CacheConfig, max_seqs: int,
                    enable_caching: bool, max_batched: int, max_model_len: int,
                    agree: Callable[[int], int] | None = None, extra_bytes_per_block: int = 0,
                    scratch_state_slots: int = 0) -> EngineCaches:
    """Size the KV cache from the memory budget (after the state pool, if any) and allocate both.

    ``agree`` (tensor parallelism): turns this rank's block count into the one every rank uses (the smallest).
    ``extra_bytes_per_block``: what each block also costs outside this cache (a draft model's KV).
    ``scratch_state_slots``: hybrid models' state slots past the pad slot for speculative verification (the state
    after each draft position, so a rejected draft's state can be rolled back)."""
    # Hybrid models (Gated DeltaNet + attention) also keep a fixed-size state per running request, and
    # (with prefix caching) as many snapshots of states at block boundaries.
    state_spec = model.state_cache_spec() if hasattr(model, "state_cache_spec") else None
    state_slots = None
    state_bytes = 0
    if state_spec is not None:
        state_slots = StateSlots(max_seqs, max_seqs if enable_caching else 0)
        # one spare slot past the owned ones: CUDA graphs point their padding rows at it; then the scratch slots
        state_bytes = (state_slots.num_slots + 1 + scratch_state_slots) * state_spec.bytes_per_slot
    try:
        num_blocks, measured = plan_kv_blocks(spec, device, cache, model, max_batched, max_model_len,
                                              reserved_bytes=state_bytes, extra_bytes_per_block=extra_bytes_per_block)
    except MemoryError as exc:
        if state_spec is None or not scratch_state_slots:
            raise
        raise MemoryError(f"{exc}; speculative decoding adds {scratch_state_slots} recurrent states to that pool "
                          "(num_speculative_tokens per sequence): lower max_num_seqs or num_speculative_tokens"
                          ) from None
    if agree is not None:
        num_blocks = agree(num_blocks)
    kv_caches = allocate_kv_cache(spec, num_blocks, device)
    state_caches = []
    if state_spec is not None and state_slots is not None:
        state_caches = allocate_state_cache(state_spec, state_slots.num_slots + 1 + scratch_state_slots, device)
        logger.info(
            "Recurrent state pool: %d Gated DeltaNet layers, %d slots for running requests + %d prefix "
            "snapshots (%.2f MiB each, %.2f GiB in all)", state_spec.num_layers, state_slots.num_running,
            state_slots.num_snapshots, state_spec.bytes_per_slot / 2**20, state_bytes / 2**30,
        )
    return EngineCaches(spec, num_blocks, kv_caches, state_slots, state_caches, measured)


def log_kv_capacity(spec: KVCacheSpec, num_blocks: int, capacity_tokens: int, max_model_len: int) -> None:
    """Say at startup how much the KV cache holds."""
    logger.info(
        "KV cache: %d blocks of %d tokens = %d tokens (%.2f GiB, %s); up to %.1f requests of %d tokens at once",
        num_blocks - 1, spec.block_size, capacity_tokens, num_blocks * spec.bytes_per_block / 2**30,
        str(spec.dtype).removeprefix("torch."), capacity_tokens / max_model_len, max_model_len)
