"""The engine as the HTTP layer sees it: an async :class:`EngineClient` protocol and what its clients share.

The HTTP layer never touches ``LLMEngine`` directly: it renders chat templates and tokenizes with
``client.tokenizer``, hands token ids to ``client.generate`` and streams the DELTA outputs it gets back.
Two clients implement the protocol: :class:`~revolta_api.clients.threaded.ThreadedEngineClient` (engine in
a background thread, for tests and ``revolta chat``) and :class:`~revolta_api.clients.mp.MPEngineClient`
(engine core in its own process joined by ZMQ, for ``revolta serve``).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeAlias, runtime_checkable

from revolta_engine.engine.stats import EngineStats
from revolta_engine.errors import RevoltaError
from revolta_engine.outputs import CompletionOutput, RequestOutput
from revolta_engine.sampling_params import RequestOutputKind, SamplingParams


class EngineDeadError(RevoltaError):
    """The engine stopped (crashed or shut down); no request can run any more."""


@dataclass
class EngineInfo:
    """Facts about the loaded model that the HTTP layer needs, fixed for the engine's life."""

    served_model_name: str
    max_model_len: int
    kv_capacity_tokens: int = 0
    eos_token_ids: list[int] = field(default_factory=list)
    # (name, value, source) as LLMEngine.config_report() gives them; values shown as text.
    config_report: list[tuple[str, str, str]] = field(default_factory=list)
    chat_template: str | None = None
    vocab_size: int = 0  # token ids accepted are 0..vocab_size-1
    # SamplingParams values a request that does not set them gets (the model's generation config, as in vLLM);
    # "max_tokens" there caps every request's output.
    default_sampling: dict[str, Any] = field(default_factory=dict)
    max_logprobs: int = 20  # most logprobs per token a request may ask for (-1: no limit)


# The engine's own stats dataclass; get_stats() returns a fresh copy, so it is safe to hand across threads
# and to encode for the engine process's IPC as it is.
StatsSnapshot: TypeAlias = EngineStats


@runtime_checkable
class EngineClient(Protocol):
    """What the HTTP layer needs from an engine, whichever process or thread runs it."""

    info: EngineInfo
    tokenizer: Any

    async def start(self) -> None:
        """Start the engine (idempotent); returns once it can take requests."""

    async def shutdown(self) -> None:
        """Stop the engine and free what it holds (idempotent)."""

    def generate(self, request_id: str, prompt: str | list[int], params: SamplingParams, priority: int = 0
                 ) -> AsyncIterator[RequestOutput]:
        """Run one request; yield its DELTA outputs until the one with ``finished=True``.

        Raises the engine's typed errors (``InvalidRequestError``, ``PromptTooLongError``) for a request
        it rejects, :class:`EngineDeadError` when the engine is gone. Leaving the iteration early aborts
        the request. ``priority``: for the engine's priority scheduling policy (lower runs first).
        """

    def abort(self, request_id: str) -> None:
        """Abort a request and free its KV blocks; never blocks, unknown ids are ignored."""

    def stats(self) -> StatsSnapshot:
        """The latest engine statistics."""

    @property
    def is_healthy(self) -> bool:
        """False once the engine has died."""


def merge_delta(into: RequestOutput, new: RequestOutput) -> None:
    """Fold DELTA output ``new`` into ``into`` so a slow reader gets one larger delta instead of many."""
    by_index = {c.index: c for c in into.outputs}
    for comp in new.outputs:
        old = by_index.get(comp.index)
        if old is None:
            into.outputs.append(comp)
            by_index[comp.index] = comp
            continue
        old.text += comp.text
        old.token_ids = list(old.token_ids) + list(comp.token_ids)
        if comp.logprobs is not None:
            old.logprobs = (old.logprobs or []) + comp.logprobs
        old.cumulative_logprob = comp.cumulative_logprob
        old.finish_reason = comp.finish_reason or old.finish_reason
        old.stop_reason = comp.stop_reason if comp.stop_reason is not None else old.stop_reason
    into.finished = new.finished
    into.metrics = new.metrics or into.metrics
    into.num_cached_tokens = max(into.num_cached_tokens, new.num_cached_tokens)
    if into.prompt_logprobs is None:
        into.prompt_logprobs = new.prompt_logprobs


class OutputStream:
    """One request's queue of outputs between the engine side and the HTTP handler (single event loop)."""

    def __init__(self) -> None:
        self._items: deque[RequestOutput | BaseException] = deque()
        self._ready = asyncio.Event()

    def put(self, item: RequestOutput | BaseException) -> None:
        """Queue an output or an error for the reader."""
        self._items.append(item)
        self._ready.set()

    async def get(self) -> RequestOutput:
        """Wait for outputs; return everything queued merged into one delta (errors raised after data)."""
        while not self._items:
            self._ready.clear()
            await self._ready.wait()
        first = self._items.popleft()
        if isinstance(first, BaseException):
            raise first
        while self._items and not isinstance(self._items[0], BaseException):
            merge_delta(first, self._items.popleft())  # type: ignore[arg-type]
        return first


class StreamingClientBase:
    """Request bookkeeping shared by the clients: one :class:`OutputStream` per running request."""

    info: EngineInfo
    tokenizer: Any

    def __init__(self) -> None:
        self._streams: dict[str, OutputStream] = {}
        self._dead: BaseException | None = None
        self._stats = StatsSnapshot()

    # Hooks the concrete clients implement.
    def _submit(self, request_id: str, prompt: str | list[int], params: SamplingParams, priority: int) -> None:
        raise NotImplementedError

    def _send_abort(self, request_ids: list[str]) -> None:
        raise NotImplementedError

    async def generate(self, request_id: str, prompt: str | list[int], params: SamplingParams, priority: int = 0
                       ) -> AsyncIterator[RequestOutput]:
        """See :meth:`EngineClient.generate`."""
        if self._dead is not None:
            raise EngineDeadError(f"the engine is not running ({self._dead})")
        if request_id in self._streams:
            raise RevoltaError(f"request id {request_id!r} is already running")
        params.output_kind = RequestOutputKind.DELTA
        stream = OutputStream()
        self._streams[request_id] = stream
        finished = False
        try:
            self._submit(request_id, prompt, params, priority)
            while not finished:
                out = await stream.get()
                finished = out.finished
                yield out
        finally:
            self._streams.pop(request_id, None)
            if not finished and self._dead is None:
                self._send_abort([request_id])

    def abort(self, request_id: str) -> None:
        """See :meth:`EngineClient.abort`."""
        stream = self._streams.pop(request_id, None)
        if self._dead is None:
            self._send_abort([request_id])
        if stream is not None:
            stream.put(_aborted_output(request_id))

    def stats(self) -> StatsSnapshot:
        """See :meth:`EngineClient.stats`."""
        return self._stats

    @property
    def is_healthy(self) -> bool:
        """False once the engine has died."""
        return self._dead is None

    def _dispatch(self, outputs: list[RequestOutput]) -> None:
        """Hand engine outputs to their requests' streams (called on the event loop)."""
        for out in outputs:
            stream = self._streams.get(out.request_id)
            if stream is not None:
                stream.put(out)

    def _fail(self, request_id: str, error: BaseException) -> None:
        stream = self._streams.get(request_id)
        if stream is not None:
            stream.put(error)

    def _die(self, error: BaseException) -> None:
        """Mark the engine dead and fail every running request with ``error``."""
        if self._dead is None:
            self._dead = error
        for stream in self._streams.values():
            stream.put(EngineDeadError(f"the engine stopped: {error}"))


def _aborted_output(request_id: str) -> RequestOutput:
    return RequestOutput(request_id=request_id, prompt=None, prompt_token_ids=[], finished=True,
                         outputs=[CompletionOutput(index=0, text="", token_ids=[], finish_reason="abort")])
