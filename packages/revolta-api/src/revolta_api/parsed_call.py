"""The engine-output loop that Anthropic's Messages and OpenAI's Responses calls share: engine deltas ->
:class:`~revolta_api.chat_output.ChatOutputParser` events -> the API's own stream events."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol

from revolta_api.chat_output import ChatOutputParser, OutputEvent
from revolta_api.state import ServerState
from revolta_api.streaming import close_stream
from revolta_engine.outputs import CompletionOutput, RequestOutput
from revolta_engine.sampling_params import SamplingParams


class EventAssembler(Protocol):
    """Turns parser events into an API's stream events (content blocks, output items)."""

    def feed(self, event: OutputEvent) -> list[dict[str, Any]]: ...

    def close(self) -> list[dict[str, Any]]: ...


class ParsedCall:
    """One single-choice request in flight whose output goes through one parser; counts the output tokens and
    keeps the finish reason. Subclasses add what else they keep through :meth:`_on_output` and
    :meth:`_on_completion`."""

    def __init__(self, state: ServerState, parser: ChatOutputParser, assembler: EventAssembler, *,
                 single_call: bool, params: SamplingParams) -> None:
        self.state = state
        self.params = params  # the request's sampling parameters (for the request metrics)
        self.parser = parser
        self.single_call = single_call
        self.output_tokens = 0
        self.finish_reason: str | None = None
        self._assembler = assembler

    def _on_output(self, out: RequestOutput) -> None:
        """Called for each engine output, before its completion is parsed."""

    def _on_completion(self, comp: CompletionOutput) -> None:
        """Called for each completion, after its events."""

    def _later_call(self, event: OutputEvent) -> bool:
        return self.single_call and event.tool is not None and event.tool.index > 0

    async def _events(self, outputs: AsyncIterator[RequestOutput]) -> AsyncIterator[dict[str, Any]]:
        """The API's events as the engine produces text; stops early when a content-side stop string matches."""
        timer = self.state.metrics.request_timer(self.params)
        async for out in outputs:
            timer.on_output(out)
            self._on_output(out)
            for comp in out.outputs:
                self.output_tokens += len(comp.token_ids)
                for event in self.parser.feed(comp.text, list(comp.token_ids)):
                    if self._later_call(event):
                        continue  # one call allowed: the first only
                    for api_event in self._assembler.feed(event):
                        yield api_event
                self.finish_reason = comp.finish_reason or self.finish_reason
                self._on_completion(comp)
            if self.parser.stopped_by is not None:
                break  # leaving the engine stream aborts the request
        for event in self.parser.finish():
            if self._later_call(event):
                continue
            for api_event in self._assembler.feed(event):
                yield api_event
        for api_event in self._assembler.close():
            yield api_event

    async def _run(self, outputs: AsyncIterator[RequestOutput]) -> None:
        """Parse ``outputs`` to the end (its events build the answer in the assembler); close the stream."""
        try:
            async for _ in self._events(outputs):
                pass
        finally:
            await close_stream(outputs)
