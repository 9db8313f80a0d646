"""Building an engine's parts from its resolved :class:`~revolta_engine.config.EngineConfig`: the model and its
runner (with tensor-parallel workers), the KV cache and its manager, the offload connector, the scheduler, the
draft proposer and the sampler. Nothing here decides a setting: every value comes from the configuration."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from revolta_engine.config import EngineConfig, ResolvedValue
from revolta_engine.config.resolve import text_config_of
from revolta_engine.core.kv_cache_manager import KVCacheManager
from revolta_engine.core.kv_connector import KVConnector
from revolta_engine.core.scheduler import Scheduler
from revolta_engine.engine.cache_setup import EngineCaches, log_kv_capacity
from revolta_engine.engine.engine_runtime import build_engine_runtime, check_tensor_parallel
from revolta_engine.engine.kv_offload_setup import offload_connector
from revolta_engine.loader.checkpoint import Checkpoint
from revolta_engine.parallel.launcher import TPWorkers
from revolta_engine.parallel.shard_runtime import ShardSettings
from revolta_engine.sample.sampler import Sampler
from revolta_engine.sample.structured import GrammarBackend
from revolta_engine.spec_decode import Proposer, load_proposer


@dataclasses.dataclass
class EngineParts:
    """What :func:`assemble_engine` built; ``measured`` holds the values only known once built (for the report)."""

    checkpoint: Checkpoint
    model: Any
    runner: Any
    tp_workers: TPWorkers | None
    caches: EngineCaches
    kv: KVCacheManager
    kv_connector: KVConnector | None
    scheduler: Scheduler
    draft: Proposer | None
    sampler: Sampler
    grammars: GrammarBackend
    eos_token_ids: set[int]  # one set: requests and grammar masks see the same ids
    generator: torch.Generator
    measured: dict[str, ResolvedValue]


def shard_settings(config: EngineConfig) -> ShardSettings:
    """The options every tensor-parallel rank builds with, taken from the configuration."""
    model, cache, sched = config.model, config.cache, config.scheduler
    return ShardSettings(
        args=config.args, config=config, model_path=model.path, dtype=model.dtype, max_model_len=model.max_model_len,
        block_size=cache.block_size, max_num_batched_tokens=sched.max_num_batched_tokens,
        max_num_seqs=sched.max_num_seqs, enable_prefix_caching=cache.enable_prefix_caching,
        kv_cache_dtype=cache.kv_cache_dtype, activation_quant=model.activation_quant,
        tensor_parallel_size=config.parallel.tensor_parallel_size, device=str(config.device))


def assemble_engine(config: EngineConfig, checkpoint: Checkpoint) -> EngineParts:
    """Load the model (and the draft model, counted in the memory budget), plan and allocate the caches, and
    build what the engine loop drives, in that order."""
    device, hf_config = config.device, checkpoint.hf_config
    sched, cache = config.scheduler, config.cache
    vocab_size = int(text_config_of(hf_config).vocab_size)
    settings = shard_settings(config)
    check_tensor_parallel(settings, hf_config, device)
    draft = load_proposer(config.speculative, checkpoint, vocab_size, settings)
    settings.draft_kv_bytes_per_block = draft.bytes_per_block if draft is not None else 0
    settings.scratch_state_slots = sched.max_num_seqs * config.num_speculative_tokens  # hybrid models only
    weights = None if config.model.load_format == "dummy" else checkpoint.iter_weights()
    runtime, runner, workers = build_engine_runtime(hf_config, weights, settings, device, config.model.enforce_eager)
    if weights is not None:
        checkpoint.check_all_shards_read()
    caches = runtime.caches
    connector = offload_connector(config.offload, settings, checkpoint.path, runtime.spec, caches.kv_caches, device,
                                  hybrid=caches.state_slots is not None)
    kv = KVCacheManager(caches.num_blocks, cache.block_size, cache.enable_prefix_caching, caches.state_slots,
                        connector)
    kv.drop_last_hit_block = draft is not None and draft.reads_target_hidden
    scheduler = Scheduler(kv, sched.max_num_seqs, sched.max_num_batched_tokens, config.model.max_model_len,
                          sched.policy)
    if draft is not None:
        draft.allocate(caches.num_blocks, sched.max_num_batched_tokens, sched.max_num_seqs, runner)
    eos_token_ids = set(checkpoint.eos_token_ids)
    grammars = GrammarBackend(checkpoint.tokenizer, vocab_size, eos_token_ids)
    generator = torch.Generator(device=device).manual_seed(config.model.seed)
    measured: dict[str, ResolvedValue] = {}
    if caches.measured_kv_bytes is not None:
        measured["kv_cache_memory_bytes"] = ResolvedValue(caches.measured_kv_bytes, "profile")
    log_kv_capacity(runtime.spec, caches.num_blocks, kv.capacity_tokens, config.model.max_model_len)
    return EngineParts(checkpoint, runtime.model, runner, workers, caches, kv, connector, scheduler, draft, Sampler(),
                       grammars, eos_token_ids, generator, measured)
