"""Rank 0's model, caches and runner: built in this process alone, or with tensor-parallel workers."""

from __future__ import annotations

import logging
import os
import weakref
from typing import Any

import torch

from revolta_engine.errors import InvalidRequestError, UnsupportedModelError
from revolta_engine.models.registry import resolve_model_class
from revolta_engine.parallel.launcher import TensorParallelRunner, TPWorkers
from revolta_engine.parallel.shard_runtime import (
    ShardRuntime,
    ShardSettings,
    build_shard_runtime,
    load_shard_model,
)
from revolta_engine.worker.cuda_graph import capture_decode_graphs

logger = logging.getLogger(__name__)


def check_tensor_parallel(settings: ShardSettings, hf_config: Any, device: torch.device) -> None:
    """Refuse at startup what tensor parallelism does not cover yet, naming it."""
    tp = settings.tensor_parallel_size
    if tp < 1:
        raise InvalidRequestError(f"tensor_parallel_size must be at least 1, got {tp}", param="tensor_parallel_size")
    if tp == 1:
        return
    cls = resolve_model_class(hf_config)
    if not getattr(cls, "supports_tensor_parallel", False):
        raise UnsupportedModelError(f"{cls.__name__} cannot be split over tensor-parallel ranks yet; use "
                                    "tensor_parallel_size 1")
    if device.type == "cuda" and torch.cuda.device_count() < tp:
        raise InvalidRequestError(f"tensor_parallel_size {tp} needs {tp} GPUs, but {torch.cuda.device_count()} "
                                  "are visible", param="tensor_parallel_size")
    if device.type == "cuda" and device.index not in (None, 0):
        raise InvalidRequestError("with tensor parallelism rank r runs on GPU r: pick the GPUs with "
                                  "CUDA_VISIBLE_DEVICES and use device 'cuda'", param="device")


def build_engine_runtime(hf_config: Any, weights: Any, settings: ShardSettings, device: torch.device,
                         enforce_eager: bool) -> tuple[ShardRuntime, Any, TPWorkers | None]:
    """``(runtime, runner, workers)``: rank 0's shard (the whole model on one rank) and the runner the engine
    drives (a :class:`TensorParallelRunner` over the workers when there are any). ``weights`` None: dummy."""
    workers = TPWorkers(settings) if settings.tensor_parallel_size > 1 else None
    if workers is not None and device.type == "cpu":
        # every rank computes at once: each takes its share of the cores (more threads only contend)
        threads = max(1, (os.cpu_count() or 1) // settings.tensor_parallel_size)
        if torch.get_num_threads() > threads:
            logger.info("Tensor parallelism on the CPU: torch uses %d thread(s) in this process (one share of the "
                        "%s cores per rank)", threads, os.cpu_count())
            torch.set_num_threads(threads)
    try:
        model = load_shard_model(hf_config, weights, settings, device, 0)
        if workers is not None:
            workers.wait_loaded()
            workers.join_groups(device)
        runtime = build_shard_runtime(model, settings, device)
    except BaseException:
        if workers is not None:
            workers.kill()
            workers.stop()
        raise
    runner: Any = runtime.runner
    if workers is not None:
        runner = TensorParallelRunner(runtime.runner, workers)
        weakref.finalize(runner, workers.stop)  # an engine dropped without shutdown() still stops its workers
        logger.info("Tensor parallelism over %d ranks (%s); decode runs without CUDA graphs", workers.size,
                    "NCCL" if device.type == "cuda" else "gloo")
    elif device.type == "cuda":
        caches = runtime.caches
        runtime.runner.graph_runner = capture_decode_graphs(
            model, caches.kv_caches, runtime.runner.buffers, settings.max_num_seqs, settings.max_model_len, device,
            settings.dtype, enforce_eager=enforce_eager, state_caches=caches.state_caches, pad_slot=caches.pad_slot,
            num_drafts=settings.config.num_speculative_tokens,
            scratch_slot=caches.scratch_slot)
    return runtime, runner, workers
