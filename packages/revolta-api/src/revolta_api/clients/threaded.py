"""An :class:`EngineClient` that drives an ``LLMEngine`` from one background thread (tests, ``revolta chat``)."""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from typing import Any

from revolta_api.clients.core_process import shutdown_engine
from revolta_api.clients.engine_info import engine_info
from revolta_api.engine_client import EngineDeadError, StatsSnapshot, StreamingClientBase
from revolta_engine.errors import RevoltaError
from revolta_engine.sampling_params import SamplingParams

logger = logging.getLogger(__name__)

_IDLE_WAIT_S = 0.5


class ThreadedEngineClient(StreamingClientBase):
    """Owns an ``LLMEngine`` and steps it on a daemon thread; commands reach it through a thread-safe queue.

    The engine is not thread-safe, so only the worker thread calls it; results come back to the event loop
    with ``call_soon_threadsafe``.
    """

    def __init__(self, engine: Any, served_model_name: str | None = None) -> None:
        super().__init__()
        self.engine = engine
        self.tokenizer = engine.tokenizer
        self.info = engine_info(engine, served_model_name)
        self._commands: queue.SimpleQueue[tuple] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop = threading.Event()

    @classmethod
    def from_engine_args(cls, engine_args: Any) -> ThreadedEngineClient:
        """Build the engine from ``EngineArgs`` (loads the model in this thread)."""
        from revolta_engine import LLMEngine

        return cls(LLMEngine.from_engine_args(engine_args), getattr(engine_args, "served_model_name", None))

    async def start(self) -> None:
        """Start the worker thread on the running event loop (idempotent)."""
        if self._thread is not None:
            return
        self._loop = asyncio.get_running_loop()
        self._stats = self.engine.get_stats()
        self._thread = threading.Thread(target=self._run, name="revolta-engine", daemon=True)
        self._thread.start()

    async def shutdown(self) -> None:
        """Stop the worker thread; running requests end with an error."""
        if self._thread is None or self._stop.is_set():
            return
        self._stop.set()
        self._commands.put(("wake",))
        await asyncio.to_thread(self._thread.join, 30)
        self._die(EngineDeadError("the engine was shut down"))

    def _submit(self, request_id: str, prompt: str | list[int], params: SamplingParams, priority: int) -> None:
        if self._thread is None:
            raise EngineDeadError("the engine client was not started")
        self._commands.put(("add", request_id, prompt, params, priority))

    def _send_abort(self, request_ids: list[str]) -> None:
        self._commands.put(("abort", request_ids))

    def _run(self) -> None:
        engine = self.engine
        try:
            while not self._stop.is_set():
                busy = engine.has_unfinished_requests()
                self._apply_commands(block=not busy)
                if engine.has_unfinished_requests():
                    outputs = engine.step()
                    stats = engine.get_stats()
                    self._to_loop(self._deliver, outputs, stats)
                elif busy is False:
                    self._to_loop(self._set_stats, engine.get_stats())
        except BaseException as exc:  # a crash in the step loop is a bug: fail everything, say why
            logger.exception("The engine loop crashed")
            self._to_loop(self._die, exc)
        finally:
            shutdown_engine(engine)

    def _apply_commands(self, block: bool) -> None:
        try:
            command = self._commands.get(timeout=_IDLE_WAIT_S) if block else self._commands.get_nowait()
        except queue.Empty:
            return
        while True:
            kind = command[0]
            if kind == "add":
                _, request_id, prompt, params, priority = command
                try:
                    self.engine.add_request(request_id, prompt, params, priority=priority)
                except RevoltaError as exc:
                    self._to_loop(self._fail, request_id, exc)
            elif kind == "abort":
                self.engine.abort_request(command[1])
            try:
                command = self._commands.get_nowait()
            except queue.Empty:
                return

    def _deliver(self, outputs: list, stats: StatsSnapshot) -> None:
        self._stats = stats
        self._dispatch(outputs)

    def _set_stats(self, stats: StatsSnapshot) -> None:
        self._stats = stats

    def _to_loop(self, fn: Any, *args: Any) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(fn, *args)
            except RuntimeError:  # loop closed between the check and the call
                pass
