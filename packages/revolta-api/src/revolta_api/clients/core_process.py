"""The engine core process: builds an ``LLMEngine`` and steps it, talking to the HTTP process over ZMQ.

It does nothing but the step loop, so HTTP parsing, tokenization and chat templating in the front process
never delay a step. It exits on a Shutdown message, on SIGTERM, or when its parent process disappears.
"""

from __future__ import annotations

import logging
import os
import pickle
import signal
import sys
from collections.abc import Callable
from typing import Any

import msgspec
import zmq

from revolta_api.clients.ipc import (
    AbortRequests,
    AddRequest,
    EngineFailed,
    InputMessage,
    Outputs,
    Ready,
    RequestFailed,
    Shutdown,
    error_info,
)

logger = logging.getLogger("revolta.engine_core")

_IDLE_POLL_MS = 1000


def _raise_exit(signum: int, frame: Any) -> None:
    raise SystemExit(0)


def build_llm_engine(engine_args: Any) -> Any:
    """The default engine factory: ``LLMEngine.from_engine_args(engine_args)``."""
    from revolta_engine import LLMEngine

    return LLMEngine.from_engine_args(engine_args)


def run_engine_core(engine_args: Any, input_address: str, output_address: str, served_model_name: str | None,
                    log_level: int = logging.INFO, engine_factory: Callable[[Any], Any] = build_llm_engine) -> None:
    """Entry point of the spawned process (``multiprocessing`` target).

    ``engine_factory`` (a picklable, module-level callable) builds the engine from ``engine_args``.
    """
    # Ctrl-C reaches the whole process group; the parent decides when the core stops.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _raise_exit)
    logging.basicConfig(level=log_level, stream=sys.stderr, format="%(levelname)s engine-core: %(message)s")
    ctx = zmq.Context()
    inputs = ctx.socket(zmq.PULL)
    inputs.connect(input_address)
    outputs = ctx.socket(zmq.PUSH)
    outputs.connect(output_address)
    encoder = msgspec.msgpack.Encoder()
    try:
        from revolta_api.clients.engine_info import engine_info

        try:
            engine = engine_factory(engine_args)
            ready = Ready(info=engine_info(engine, served_model_name), tokenizer=pickle.dumps(engine.tokenizer))
        except Exception as exc:
            logger.debug("engine start failed", exc_info=True)
            outputs.send(encoder.encode(EngineFailed(error=error_info(exc))))
            return
        outputs.send(encoder.encode(ready))
        try:
            _step_loop(engine, inputs, outputs, encoder)
        except Exception as exc:
            logger.exception("The engine step loop crashed")
            outputs.send(encoder.encode(EngineFailed(error=error_info(exc))))
        finally:
            shutdown_engine(engine)
    finally:
        inputs.close(linger=0)
        outputs.close(linger=1000)
        ctx.term()


def shutdown_engine(engine: Any) -> None:
    """Let the engine finish what it owes outside the process (queued KV offload writes) before exiting."""
    shutdown = getattr(engine, "shutdown", None)
    if shutdown is None:
        return
    try:
        shutdown()
    except Exception:
        logger.exception("Shutting the engine down failed")


def _step_loop(engine: Any, inputs: zmq.Socket, outputs: zmq.Socket, encoder: msgspec.msgpack.Encoder) -> None:
    from revolta_engine.errors import RevoltaError

    decoder = msgspec.msgpack.Decoder(InputMessage)
    poller = zmq.Poller()
    poller.register(inputs, zmq.POLLIN)
    parent = os.getppid()
    while True:
        busy = engine.has_unfinished_requests()
        changed = False
        if poller.poll(0 if busy else _IDLE_POLL_MS):
            while True:
                try:
                    message = decoder.decode(inputs.recv(zmq.NOBLOCK))
                except zmq.Again:
                    break
                changed = True
                if isinstance(message, AddRequest):
                    try:
                        engine.add_request(message.request_id, message.prompt, message.params,
                                           priority=message.priority)
                    except RevoltaError as exc:
                        outputs.send(encoder.encode(RequestFailed(message.request_id, error_info(exc))))
                elif isinstance(message, AbortRequests):
                    engine.abort_request(message.request_ids)
                elif isinstance(message, Shutdown):
                    return
        elif not busy and os.getppid() != parent:
            logger.warning("The server process is gone; the engine core stops.")
            return
        if engine.has_unfinished_requests():
            step_outputs = engine.step()
            outputs.send(encoder.encode(Outputs(step_outputs, engine.get_stats())))
        elif changed:
            outputs.send(encoder.encode(Outputs([], engine.get_stats())))
