"""The main function of a tensor-parallel worker process (ranks 1..N-1).

It loads its shard, reports to rank 0 over a pipe (an error's text, or that it is loaded), joins the process
groups, builds its cache and runner as rank 0 does, then runs every step rank 0 broadcasts until it gets None.
It exits if rank 0's process goes away, so a killed engine leaves no worker behind.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

import torch

from revolta_engine.config.speculative import parse_speculative_config
from revolta_engine.engine.kv_offload_setup import offload_connector
from revolta_engine.engine.prompt_logprobs import ROWS_PER_PASS
from revolta_engine.parallel.communication import broadcast_object, broadcast_tensor
from revolta_engine.parallel.kv_offload import KVTransfer, KVTransferWorker
from revolta_engine.parallel.shard_runtime import (
    ShardRuntime,
    ShardSettings,
    build_shard_runtime,
    load_shard_model,
    shard_device,
)
from revolta_engine.parallel.state import (
    TensorParallelLayout,
    destroy_process_groups,
    init_process_groups,
)
from revolta_engine.parallel.step_plan import StepPlan
from revolta_engine.spec_decode.mtp import build_mtp_head
from revolta_engine.spec_decode.mtp_parallel import MtpPass, MtpWorker

logger = logging.getLogger(__name__)

_PARENT_POLL_S = 1.0


def _exit_with_parent(parent_pid: int) -> None:
    """Leave as soon as the engine's process is gone (a worker must not outlive it, also when it is killed)."""
    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(_PARENT_POLL_S)
        os._exit(1)

    threading.Thread(target=watch, name="revolta-tp-parent-watch", daemon=True).start()


def run_tp_worker(settings: ShardSettings, rank: int, conn: Any, parent_pid: int) -> None:
    """Entry point of rank ``rank``'s process (spawned by :class:`~revolta_engine.parallel.launcher.TPWorkers`)."""
    _exit_with_parent(parent_pid)
    logging.basicConfig(level=logging.WARNING, format=f"%(asctime)s rank {rank} %(levelname)s %(message)s")
    from revolta_engine.loader import load_checkpoint

    device = shard_device(torch.device(settings.device), rank)
    try:
        if device.type == "cuda":
            torch.cuda.set_device(device)
        else:
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // settings.tensor_parallel_size))
        checkpoint = load_checkpoint(settings.model_path, skip_tokenizer_init=True,
                                     load_format=settings.args.load_format, hf_overrides=settings.args.hf_overrides)
        weights = None if settings.args.load_format == "dummy" else checkpoint.iter_weights()
        model = load_shard_model(checkpoint.hf_config, weights, settings, device, rank)
        if weights is not None:
            checkpoint.check_all_shards_read()
        head = _mtp_head(checkpoint, settings, device, rank)
    except BaseException as exc:  # reported to rank 0, which raises it at startup
        conn.send(("failed", type(exc).__name__, str(exc)))
        return
    conn.send(("loaded",))
    init_process_groups(TensorParallelLayout(rank, settings.tensor_parallel_size), settings.init_method, device)
    try:
        runtime = build_shard_runtime(model, settings, device)
        mtp = MtpWorker(head, runtime.runner, runtime.caches.num_blocks, settings, device) if head else None
        kv = _kv_transfers(settings, runtime, device, rank)
        try:
            _serve_steps(runtime, device, mtp, kv)
        finally:
            if kv is not None:
                kv.close()
    finally:
        destroy_process_groups()


def _mtp_head(checkpoint: Any, settings: ShardSettings, device: torch.device, rank: int) -> Any:
    """This rank's shard of the MTP head when the speculative config asks for it (None otherwise)."""
    spec = parse_speculative_config(settings.args.speculative_config)
    return build_mtp_head(checkpoint, settings, device, rank) if spec is not None and spec.method == "mtp" else None


def _kv_transfers(settings: ShardSettings, runtime: ShardRuntime, device: torch.device,
                  rank: int) -> KVTransferWorker | None:
    """This rank's KV offload tiers over its shard of the cache, when the engine offloads (None otherwise)."""
    connector = offload_connector(settings.config.offload, settings,
                                  Path(settings.model_path), runtime.spec, runtime.caches.kv_caches, device,
                                  hybrid=runtime.caches.state_slots is not None, rank=rank)
    return KVTransferWorker(connector) if connector is not None else None


@torch.inference_mode()
def _serve_steps(runtime: ShardRuntime, device: torch.device, mtp: MtpWorker | None = None,
                 kv: KVTransferWorker | None = None) -> None:
    """Mirror rank 0's steps: the same forward pass over this rank's shard, the same logits collectives, and the
    sampled token ids rank 0 broadcasts (the next step may feed them on the device); and the MTP head's passes."""
    runner, model = runtime.runner, runtime.model
    while True:
        plan: StepPlan | MtpPass | KVTransfer | None = broadcast_object(None)
        if plan is None:
            return
        if isinstance(plan, MtpPass):
            assert mtp is not None, "rank 0 sent an MTP pass to a worker without the head"
            mtp.run(plan)
            continue
        if isinstance(plan, KVTransfer):
            assert kv is not None, "rank 0 sent a KV transfer to a worker without KV offload"
            kv.run(plan)
            continue
        if plan.state_resets:
            runner.reset_state_slots([slot for slot, _ in plan.state_resets], [src for _, src in plan.state_resets])
        runner.execute(plan.scheduled, plan.block_tables, plan.state_slots, plan.snapshots,  # type: ignore[arg-type]
                       keep_rows=plan.keep_rows)
        kept = runner.kept_hidden
        if plan.keep_rows and kept is not None:  # rank 0's prompt logprobs, pass by pass
            for lo in range(0, kept.shape[0], ROWS_PER_PASS):
                model.compute_logits(kept[lo:lo + ROWS_PER_PASS])
        if plan.num_sampled:
            tokens = broadcast_tensor(torch.empty(plan.num_sampled, dtype=torch.int64, device=device))
            runner.record_sampled(tokens, [s.request.request_id for s in plan.scheduled if s.completes
                                           for _ in range(s.num_drafts + 1)])
