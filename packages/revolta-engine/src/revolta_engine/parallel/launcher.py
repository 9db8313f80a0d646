"""Rank 0's side of tensor parallelism: it starts the worker processes, waits for their shards, and sends them
every step through :class:`TensorParallelRunner`.

Startup is checked at each stage: a worker that fails to load reports its error, which rank 0 raises (the same
type where it is one of ours); a worker that dies without a word is noticed within a second. Once serving, a
watchdog ends the engine's process loudly if a worker dies, since the ranks' collectives would otherwise wait
forever on it.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import socket
import threading
import time
from typing import Any

import torch
import torch.distributed as dist

from revolta_engine import errors
from revolta_engine.errors import InvalidRequestError, ModelLoadError
from revolta_engine.parallel.communication import broadcast_object, broadcast_tensor
from revolta_engine.parallel.shard_runtime import ShardSettings
from revolta_engine.parallel.state import (
    TensorParallelLayout,
    destroy_process_groups,
    init_process_groups,
)
from revolta_engine.parallel.step_plan import StepPlan, remote_scheduled
from revolta_engine.parallel.worker import run_tp_worker
from revolta_engine.worker.model_runner import ModelRunner

logger = logging.getLogger(__name__)

_POLL_S = 0.5
_JOIN_S = 30.0


def _free_tcp_address() -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"


def _exit_message(rank: int, exitcode: int | None) -> str:
    return (f"tensor-parallel rank {rank}'s process exited while loading its shard (exit code {exitcode}). Worker "
            "processes are started with 'spawn', which imports the main script again: a script that makes an LLM "
            "must do so under `if __name__ == \"__main__\":`")


class TPWorkers:
    """The processes of ranks 1..N-1."""

    def __init__(self, settings: ShardSettings) -> None:
        if dist.is_initialized():
            raise InvalidRequestError("another tensor-parallel engine is still running in this process; call its "
                                      "shutdown() (or leave its `with LLM(...)` block) first",
                                      param="tensor_parallel_size")
        settings.init_method = settings.init_method or _free_tcp_address()
        self.settings = settings
        self.size = settings.tensor_parallel_size
        self._closing = False
        self._joined = False
        ctx = multiprocessing.get_context("spawn")
        self.procs: list[Any] = []
        self.conns: list[Any] = []
        for rank in range(1, self.size):
            parent_end, child_end = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=run_tp_worker, args=(settings, rank, child_end, os.getpid()),
                               name=f"revolta-tp-rank{rank}", daemon=True)
            proc.start()
            child_end.close()
            self.procs.append(proc)
            self.conns.append(parent_end)
        logger.info("Tensor parallelism: started %d worker process(es) for ranks 1..%d", self.size - 1,
                    self.size - 1)

    def wait_loaded(self, timeout_s: float = 3600.0) -> None:
        """Block until every worker has loaded its shard; raise its error if one failed."""
        deadline = time.monotonic() + timeout_s
        pending = dict(enumerate(self.conns, start=1))
        while pending:
            for rank, conn in list(pending.items()):
                if conn.poll(_POLL_S / max(1, len(pending))):
                    try:
                        msg = conn.recv()
                    except EOFError:  # it died before a word: see below
                        msg = ("exited",)
                    if msg[0] == "exited":
                        self.procs[rank - 1].join(_JOIN_S)
                        raise ModelLoadError(_exit_message(rank, self.procs[rank - 1].exitcode))
                    if msg[0] == "failed":
                        cls = getattr(errors, msg[1], None)
                        cls = cls if isinstance(cls, type) and issubclass(cls, errors.RevoltaError) else ModelLoadError
                        raise cls(f"tensor-parallel rank {rank}: {msg[2]}")
                    del pending[rank]
                elif not self.procs[rank - 1].is_alive():
                    raise ModelLoadError(_exit_message(rank, self.procs[rank - 1].exitcode))
            if time.monotonic() > deadline:
                raise ModelLoadError(f"tensor-parallel rank(s) {sorted(pending)} did not load within {timeout_s:.0f} s")

    def join_groups(self, device: torch.device) -> None:
        """Rank 0 joins the process groups, then watches its workers."""
        init_process_groups(TensorParallelLayout(0, self.size), self.settings.init_method, device)
        threading.Thread(target=self._watch, name="revolta-tp-watchdog", daemon=True).start()

    def _watch(self) -> None:
        while not self._closing:
            for rank, proc in enumerate(self.procs, start=1):
                if not proc.is_alive() and not self._closing:
                    logger.critical("tensor-parallel rank %d's process died (exit code %s); the engine cannot go "
                                    "on without its shard and stops now", rank, proc.exitcode)
                    logging.shutdown()
                    os._exit(1)
            time.sleep(_POLL_S)

    def stop(self) -> None:
        """Tell the workers to finish (once the groups are up), wait for them, then leave the groups. Idempotent."""
        if self._joined:
            return
        self._joined = True
        self._closing = True
        try:
            broadcast_object(None)
        except Exception:  # the groups never came up or a peer is gone: the workers are ended below
            pass
        for proc in self.procs:
            proc.join(_JOIN_S)
        self.kill()
        destroy_process_groups()

    def kill(self) -> None:
        """End the worker processes now (startup failed)."""
        self._closing = True
        for proc in self.procs:
            if proc.is_alive():
                proc.kill()
                proc.join(_JOIN_S)


class TensorParallelRunner:
    """Rank 0's runner: each step's plan goes to the workers before rank 0 runs its own shard, and the sampled
    token ids follow it (the workers' next step may feed them). Same interface as :class:`ModelRunner`."""

    def __init__(self, runner: ModelRunner, workers: TPWorkers) -> None:
        self.inner = runner
        self.workers = workers
        self._resets: list[tuple[int, int | None]] = []  # state slots the workers reset before their next step
        self.graph_query_len = 0  # split steps run eagerly (see ModelRunner.graph_query_len)

    @property
    def kept_hidden(self) -> torch.Tensor | None:
        return self.inner.kept_hidden

    @property
    def graph_runner(self) -> Any:
        return self.inner.graph_runner

    def reset_state_slots(self, slots: list[int], sources: list[int | None]) -> None:
        """Reset rank 0's state slots now and the workers' before their next step."""
        self.inner.reset_state_slots(slots, sources)
        self._resets.extend(zip(slots, sources, strict=True))

    def execute(self, scheduled: list, block_tables: list[list[int]], state_slots: list[int] | None = None,
                snapshots: list | None = None, keep_rows: list[int] | None = None,
                draft_snapshots: list | None = None) -> torch.Tensor:
        """Send the step to the workers, then run rank 0's shard (see :meth:`ModelRunner.execute`; split steps run
        eagerly, so the draft positions' snapshots join the others)."""
        if draft_snapshots:
            snapshots = (snapshots or []) + draft_snapshots
        resets, self._resets = self._resets, []
        broadcast_object(StepPlan([remote_scheduled(s) for s in scheduled], block_tables, keep_rows, resets,
                                  state_slots, snapshots))
        return self.inner.execute(scheduled, block_tables, state_slots, snapshots, keep_rows)

    def record_sampled(self, token_ids: torch.Tensor, request_ids: list[str]) -> None:
        """Broadcast the sampled ids to the workers, then remember them (see :meth:`ModelRunner.record_sampled`)."""
        if token_ids.dtype != torch.int64 or not token_ids.is_contiguous():
            token_ids = token_ids.to(torch.int64).contiguous()
        broadcast_tensor(token_ids)
        self.inner.record_sampled(token_ids, request_ids)

    def shutdown(self) -> None:
        """Stop the workers (idempotent)."""
        self.workers.stop()
