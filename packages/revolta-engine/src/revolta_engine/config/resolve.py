"""``resolve_engine_config(args)``: the user's arguments resolved against the checkpoint, the device and the
environment into one frozen :class:`EngineConfig`, with every check that can fail before a weight is read.

Each failure is an ``InvalidRequestError`` (or ``UnsupportedModelError``) naming the option at fault.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

import revolta_kernels
from revolta_engine import envs
from revolta_engine.config.args import EngineArgs
from revolta_engine.config.checkpoint import model_path, open_checkpoint, resolve_checkpoint_options
from revolta_engine.config.device import (
    check_dtype_on_device,
    choose_dtype,
    native_kernels_note,
    resolve_device,
)
from revolta_engine.config.engine_config import (
    CacheConfig,
    EngineConfig,
    ModelConfig,
    ParallelConfig,
    SchedulerConfig,
)
from revolta_engine.config.model_len import resolve_max_model_len
from revolta_engine.config.offload import resolve_offload_options
from revolta_engine.config.sources import _UNSET, ConfigResolver
from revolta_engine.config.speculative import parse_speculative_config
from revolta_engine.core.request_queue import POLICIES
from revolta_engine.errors import InvalidRequestError
from revolta_engine.layers.activation_quant import check_activation_quant
from revolta_engine.loader.checkpoint import Checkpoint
from revolta_engine.worker.kv_cache import resolve_kv_cache_dtype

logger = logging.getLogger(__name__)

CPU_KV_CACHE_BYTES = 2 * 2**30  # default KV budget on the CPU
CPU_MAX_NUM_BATCHED_TOKENS, GPU_MAX_NUM_BATCHED_TOKENS = 2048, 8192


def text_config_of(hf_config: Any) -> Any:
    """The language model's settings: multimodal checkpoints keep them in a text sub-config."""
    return hf_config.get_text_config() if hasattr(hf_config, "get_text_config") else hf_config


def resolve_engine_config(args: EngineArgs, checkpoint: Checkpoint | None = None) -> EngineConfig:
    """Resolve and check every engine option; ``checkpoint``: the one ``args`` name, when already open."""
    cfg = ConfigResolver(args)
    if checkpoint is None:
        checkpoint = open_checkpoint(args)
    path = model_path(args)
    if args.model is None:
        cfg.set("model", path, "default")  # the embedded model
    else:
        cfg.resolve("model")
    cfg.resolve("hf_overrides")
    device = resolve_device(cfg.resolve("device"))
    device_source = cfg.values["device"].source
    cfg.set("device", str(device), "profile" if device_source == "default" else device_source)
    served_model_name = cfg.resolve("served_model_name") or path
    sampling_defaults = resolve_checkpoint_options(cfg, checkpoint)
    cfg.set("served_model_name", served_model_name, cfg.source_of("served_model_name"))
    model = _model_config(cfg, checkpoint, device, path, served_model_name, sampling_defaults)
    scheduler, speculative = _scheduler_config(cfg, device)
    kv_dtype = resolve_kv_cache_dtype(args.kv_cache_dtype, model.dtype)
    cfg.set("kv_cache_dtype", str(kv_dtype).removeprefix("torch."), cfg.source_of("kv_cache_dtype"))
    offload = resolve_offload_options(cfg)
    cache = CacheConfig(cfg.values["block_size"].value, cfg.values["enable_prefix_caching"].value, kv_dtype,
                        float(cfg.resolve("gpu_memory_utilization")),
                        cfg.resolve("kv_cache_memory_bytes", CPU_KV_CACHE_BYTES if device.type == "cpu" else _UNSET),
                        cfg.resolve("num_gpu_blocks_override"))
    tp = int(cfg.values["tensor_parallel_size"].value)
    if tp < 1:
        raise InvalidRequestError(f"tensor_parallel_size must be at least 1, got {tp}", param="tensor_parallel_size")
    return EngineConfig(args, device, model, cache, scheduler, ParallelConfig(tp), speculative, offload,
                        dict(cfg.values), tuple(envs.set_env_vars()))


def _model_config(cfg: ConfigResolver, checkpoint: Checkpoint, device: torch.device, path: str,
                  served_model_name: str, sampling_defaults: dict[str, Any]) -> ModelConfig:
    """The dtype (checked against the device), activation quantization and context length."""
    ckpt_dtype = getattr(checkpoint.hf_config, "dtype", None)
    if isinstance(ckpt_dtype, str):
        ckpt_dtype = getattr(torch, ckpt_dtype, None)
    dtype, source = choose_dtype(cfg.args.dtype, ckpt_dtype, device)
    cfg.set("dtype", str(dtype).removeprefix("torch."), source)
    check_dtype_on_device(dtype, device)
    note = native_kernels_note(device, revolta_kernels.native_available(), revolta_kernels.native_status())
    if note:
        logger.warning(note)
    activation_quant = str(cfg.resolve("activation_quant"))
    check_activation_quant(activation_quant)  # given to the model's layers when it is built
    max_model_len = resolve_max_model_len(cfg, text_config_of(checkpoint.hf_config))
    args = cfg.args
    return ModelConfig(path, served_model_name, dtype, max_model_len, args.load_format, int(args.seed),
                       activation_quant, bool(args.enforce_eager), args.chat_template, int(args.max_logprobs),
                       sampling_defaults)


def _scheduler_config(cfg: ConfigResolver, device: torch.device) -> tuple[SchedulerConfig, Any]:
    """The step's budget and policy, and the speculation settings (which decide whether scheduling is async)."""
    block_size = cfg.resolve("block_size")
    if not isinstance(block_size, int) or block_size < 1:
        raise InvalidRequestError(f"block_size must be a positive integer, got {block_size!r}", param="block_size")
    default_batched = CPU_MAX_NUM_BATCHED_TOKENS if device.type == "cpu" else GPU_MAX_NUM_BATCHED_TOKENS
    max_batched = int(cfg.resolve("max_num_batched_tokens", default_batched))
    max_seqs = int(cfg.resolve("max_num_seqs"))
    cfg.resolve("enable_prefix_caching")
    for name in ("seed", "tensor_parallel_size", "enforce_eager", "load_format"):
        cfg.resolve(name)
    speculative = parse_speculative_config(cfg.resolve("speculative_config"))
    # Overlap the host's work for the next step with the device's work on this one (GPU only: on the CPU the
    # forward pass itself runs on the host). With speculation a step that verified drafts, or after which drafts
    # could follow, is finished before the next one is scheduled (LLMEngine._needs_tokens_first).
    async_scheduling = bool(cfg.resolve("async_scheduling", device.type == "cuda"))
    policy = cfg.resolve("scheduling_policy")
    cfg.resolve("max_logprobs")
    if policy not in POLICIES:
        raise InvalidRequestError(f"scheduling_policy must be one of {', '.join(POLICIES)}, got {policy!r}",
                                  param="scheduling_policy")
    return SchedulerConfig(max_seqs, max_batched, policy, async_scheduling), speculative
