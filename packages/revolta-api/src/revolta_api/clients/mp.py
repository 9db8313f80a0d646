"""An :class:`EngineClient` whose engine core runs in its own process, joined by ZMQ (what ``revolta serve`` uses)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import pickle
import shutil
import tempfile
from collections.abc import Callable
from typing import Any

import msgspec
import zmq
import zmq.asyncio

from revolta_api.clients.core_process import build_llm_engine, run_engine_core
from revolta_api.clients.ipc import (
    AbortRequests,
    AddRequest,
    EngineFailed,
    OutputMessage,
    Outputs,
    Ready,
    RequestFailed,
    Shutdown,
    rebuild_error,
)
from revolta_api.engine_client import EngineDeadError, StreamingClientBase
from revolta_engine.errors import ModelLoadError
from revolta_engine.sampling_params import SamplingParams

logger = logging.getLogger(__name__)

_WATCH_INTERVAL_S = 0.5
_STOP_TIMEOUT_S = 10.0


class MPEngineClient(StreamingClientBase):
    """Spawns the engine core process and talks to it over two ZMQ PUSH/PULL pipes (IPC sockets).

    Requests go out as token ids with their ``SamplingParams``; DELTA outputs and engine statistics come
    back after every step. The process is stopped by :meth:`shutdown` (or :meth:`close`), and stops by
    itself when this process dies.
    """

    def __init__(self, engine_args: Any, served_model_name: str | None = None,
                 startup_timeout_s: float = 1800.0, log_level: int = logging.INFO,
                 engine_factory: Callable[[Any], Any] = build_llm_engine) -> None:
        super().__init__()
        self.engine_factory = engine_factory
        self.engine_args = engine_args
        self.served_model_name = served_model_name
        self.startup_timeout_s = startup_timeout_s
        self.log_level = log_level
        self.process: multiprocessing.process.BaseProcess | None = None
        self._encoder = msgspec.msgpack.Encoder()
        self._decoder = msgspec.msgpack.Decoder(OutputMessage)
        self._tasks: list[asyncio.Task] = []
        self._closing = False
        self._started = False

    async def start(self) -> None:
        """Spawn the core process and wait until its model is loaded (idempotent).

        Raises the engine's error (``ModelLoadError`` and kin) when the model cannot be loaded.
        """
        if self._started:
            return
        self._started = True
        self._dir = tempfile.mkdtemp(prefix="revolta-ipc-")
        input_address, output_address = f"ipc://{self._dir}/input", f"ipc://{self._dir}/output"
        self._send_ctx = zmq.Context()
        self._input = self._send_ctx.socket(zmq.PUSH)
        self._input.setsockopt(zmq.SNDHWM, 0)
        self._input.bind(input_address)
        self._recv_ctx = zmq.asyncio.Context()
        self._output = self._recv_ctx.socket(zmq.PULL)
        self._output.setsockopt(zmq.RCVHWM, 0)
        self._output.bind(output_address)
        spawn = multiprocessing.get_context("spawn")
        self.process = spawn.Process(
            target=run_engine_core, name="revolta-engine-core",
            args=(self.engine_args, input_address, output_address, self.served_model_name, self.log_level,
                  self.engine_factory))
        self.process.start()
        try:
            first = await self._wait_first_message()
        except BaseException:
            self.close()
            raise
        if isinstance(first, EngineFailed):
            self.close()
            raise rebuild_error(first.error)
        if not isinstance(first, Ready):
            self.close()
            raise EngineDeadError(f"the engine core sent {type(first).__name__} before it was ready")
        self.info = first.info
        self.tokenizer = pickle.loads(first.tokenizer)
        self._tasks = [asyncio.create_task(self._receive_loop(), name="revolta-engine-outputs"),
                       asyncio.create_task(self._watch_process(), name="revolta-engine-watchdog")]

    async def _wait_first_message(self) -> Any:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.startup_timeout_s
        while not await self._output.poll(int(_WATCH_INTERVAL_S * 1000)):
            assert self.process is not None
            if not self.process.is_alive():
                raise ModelLoadError(
                    f"the engine process exited with code {self.process.exitcode} while loading the model")
            if loop.time() > deadline:
                raise ModelLoadError(f"the engine did not finish loading within {self.startup_timeout_s:.0f} s")
        return self._decoder.decode(await self._output.recv())

    async def _receive_loop(self) -> None:
        while True:
            message = self._decoder.decode(await self._output.recv())
            if isinstance(message, Outputs):
                if message.stats is not None:
                    self._stats = message.stats
                self._dispatch(message.outputs)
            elif isinstance(message, RequestFailed):
                self._fail(message.request_id, rebuild_error(message.error))
            elif isinstance(message, EngineFailed):
                logger.error("The engine core failed: %s", message.error.message)
                self._die(rebuild_error(message.error))

    async def _watch_process(self) -> None:
        while True:
            await asyncio.sleep(_WATCH_INTERVAL_S)
            assert self.process is not None
            if not self.process.is_alive() and not self._closing:
                logger.error("The engine core process exited unexpectedly (exit code %s).",
                             self.process.exitcode)
                self._die(EngineDeadError(f"the engine core process exited with code {self.process.exitcode}"))
                return

    def _send(self, message: object) -> bool:
        """Queue a message for the core without ever blocking; False when no core is connected.

        (A PUSH socket blocks while it has no peer, which is what a dead core looks like.)
        """
        try:
            self._input.send(self._encoder.encode(message), flags=zmq.NOBLOCK, copy=False)
            return True
        except zmq.Again:
            return False

    def _submit(self, request_id: str, prompt: str | list[int], params: SamplingParams, priority: int) -> None:
        if (self._dead is not None or not self._tasks
                or not self._send(AddRequest(request_id, prompt, params, priority))):
            raise EngineDeadError("the engine is not running")

    def _send_abort(self, request_ids: list[str]) -> None:
        if not self._closing and self._tasks:
            self._send(AbortRequests(request_ids))

    async def shutdown(self) -> None:
        """Ask the core to stop, wait for it (then terminate it if it hangs), and close the sockets."""
        if self._closing or self.process is None:
            return
        with contextlib.suppress(zmq.ZMQError):
            self._send(Shutdown())
        await asyncio.to_thread(self.process.join, _STOP_TIMEOUT_S)
        self.close()

    def close(self) -> None:
        """Stop the core process now (terminate, then kill) and release every resource; safe to repeat."""
        if self._closing or not self._started:
            return
        self._closing = True
        for task in self._tasks:
            task.cancel()
        process = self.process
        if process is not None:
            if process.is_alive():
                process.terminate()
                process.join(_STOP_TIMEOUT_S)
            if process.is_alive():
                process.kill()
                process.join()
        self._input.close(linger=0)
        self._output.close(linger=0)
        self._send_ctx.term()
        self._recv_ctx.term()
        shutil.rmtree(self._dir, ignore_errors=True)
        self._die(EngineDeadError("the engine was shut down"))
