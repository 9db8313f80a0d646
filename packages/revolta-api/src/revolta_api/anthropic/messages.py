"""``POST /v1/messages`` and ``POST /v1/messages/count_tokens``: Anthropic's Messages API over the engine."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from revolta_api.anthropic import convert
from revolta_api.anthropic.blocks import BlockAssembler
from revolta_api.anthropic.errors import anthropic_error_event
from revolta_api.anthropic.protocol import CountTokensRequest, MessagesRequest
from revolta_api.chat_parsing import ChatParsing, constrain_after_reasoning, get_parsing, output_constraint
from revolta_api.errors import ApiError, to_api_error
from revolta_api.openai.serving import check_prompt_ids
from revolta_api.parsed_call import ParsedCall
from revolta_api.state import ServerState, get_state
from revolta_api.streaming import (
    chain_first,
    close_stream,
    json_reply,
    json_response,
    prime_streams,
    sse_response,
    typed_sse_event,
)
from revolta_api.structured import anthropic_structured_outputs
from revolta_engine.engine.prompt_input import encode_prompt
from revolta_engine.outputs import CompletionOutput, RequestOutput
from revolta_engine.sampling_params import SamplingParams

router = APIRouter()

# Anthropic's own limit on a Messages request body.
MAX_REQUEST_BYTES = 32 * 1024 * 1024


def _check_size(request: Request) -> None:
    length = request.headers.get("content-length")
    if length and length.isdigit() and int(length) > MAX_REQUEST_BYTES:
        raise ApiError(413, f"Request body is {int(length)} bytes; the limit is {MAX_REQUEST_BYTES} bytes.",
                       "invalid_request")


def _render(state: ServerState, parsing: ChatParsing, body: CountTokensRequest) -> list[int]:
    """The prompt token ids the engine will run for ``body``."""
    messages = convert.chat_messages(body)
    prefill = messages[-1]["role"] == "assistant"
    prompt = state.renderer.render(messages, add_generation_prompt=not prefill, continue_final_message=prefill,
                                   tools=convert.chat_tools(body, parsing).tools,
                                   template_kwargs=convert.thinking_kwargs(body))
    prompt_ids = encode_prompt(state.client.tokenizer, prompt, param="messages")
    check_prompt_ids(prompt_ids, state.client.info.max_model_len, state.client.info.vocab_size, param="messages")
    return prompt_ids


@router.post("/v1/messages/count_tokens")
async def count_tokens(body: CountTokensRequest, request: Request) -> Response:
    """The number of prompt tokens ``/v1/messages`` would run for the same conversation."""
    _check_size(request)
    state = get_state(request)
    state.check_model(body.model)
    tokens = len(_render(state, get_parsing(request), body))
    return json_response({"input_tokens": tokens})


@router.post("/v1/messages")
async def create_message(body: MessagesRequest, request: Request) -> Response:
    """Anthropic Messages (streaming and not)."""
    _check_size(request)
    state = get_state(request)
    state.check_model(body.model)
    state.note_unknown_fields("/v1/messages", body.unknown_fields())
    structured = anthropic_structured_outputs(body.model_extra or {})
    parsing = get_parsing(request)
    prompt_ids = _render(state, parsing, body)
    params = convert.sampling_params(body, prompt_len=len(prompt_ids), max_model_len=state.client.info.max_model_len,
                                     engine_stops=not parsing.stops_after_reasoning,
                                     defaults=state.client.info.default_sampling)
    call = _MessageCall(state, parsing, body, prompt_ids, params)
    params.structured_outputs = output_constraint(
        call.plan.forced, structured, conflict="tool_choice 'any' or 'tool' already constrains the output; it "
        "cannot be combined with output_config.format.")
    constrain_after_reasoning(params, call.parser, parsing)
    if body.stream:
        stream, = await prime_streams(request, [state.client.generate(call.id, prompt_ids, params)])
        return sse_response(call.stream(stream))
    return await json_reply(request, call.complete())


class _MessageCall(ParsedCall):
    """One Messages request in flight: engine deltas -> parser events -> content blocks."""

    def __init__(self, state: ServerState, parsing: ChatParsing, body: MessagesRequest, prompt_ids: list[int],
                 params: SamplingParams) -> None:
        self.body = body
        self.prompt_ids = prompt_ids
        self.params = params
        self.id = "msg_" + uuid.uuid4().hex[:24]
        self.plan = convert.chat_tools(body, parsing)
        choice = body.tool_choice
        parser = parsing.output_parser(
            state.client.tokenizer, prompt_ids=prompt_ids, tools=self.plan.tools,
            thinking=state.renderer.thinking(convert.thinking_kwargs(body)), stop=body.stop_sequences,
            tool_call_parser=self.plan.parser)
        self.blocks = BlockAssembler()
        super().__init__(state, parser, self.blocks, single_call=bool(choice and choice.disable_parallel_tool_use),
                         params=params)
        self.engine_stop: Any = None
        self.cached_tokens = 0

    def _on_output(self, out: RequestOutput) -> None:
        self.cached_tokens = out.num_cached_tokens

    def _usage(self) -> dict[str, int]:
        """Anthropic's usage: ``input_tokens`` excludes the prompt tokens read from the prefix cache, which are
        ``cache_read_input_tokens`` (the total is their sum plus ``cache_creation_input_tokens``, always 0: the
        prefix cache fills itself, nothing is written on request)."""
        return {"input_tokens": len(self.prompt_ids) - self.cached_tokens, "output_tokens": self.output_tokens,
                "cache_creation_input_tokens": 0, "cache_read_input_tokens": self.cached_tokens}

    def _message(self, content: list[dict], stop_reason: str | None, stop_sequence: str | None) -> dict:
        return {"id": self.id, "type": "message", "role": "assistant", "model": self.state.model_name,
                "content": content, "stop_reason": stop_reason, "stop_sequence": stop_sequence,
                "usage": self._usage()}

    def _on_completion(self, comp: CompletionOutput) -> None:
        if comp.stop_reason is not None:
            self.engine_stop = comp.stop_reason

    def _stop(self) -> tuple[str, str | None]:
        """Anthropic's stop_reason and stop_sequence."""
        if self.parser.stopped_by is not None:
            return "stop_sequence", self.parser.stopped_by
        if self.finish_reason == "length":
            return "max_tokens", None
        if self.blocks.has_tool_use:
            return "tool_use", None
        if isinstance(self.engine_stop, str) and self.engine_stop in (self.body.stop_sequences or []):
            return "stop_sequence", self.engine_stop
        return "end_turn", None

    async def complete(self) -> dict:
        """Run to the end and build the ``message`` object."""
        await self._run(self.state.client.generate(self.id, self.prompt_ids, self.params))
        return self._message(self.blocks.blocks, *self._stop())

    async def stream(self, outputs: AsyncIterator[RequestOutput]) -> AsyncIterator[bytes]:
        """Anthropic's SSE sequence; an error after the start becomes an ``error`` event that ends the stream."""
        try:
            # the first output is already here (prime_streams): it says how much of the prompt the cache held
            first = await anext(outputs)
            self.cached_tokens = first.num_cached_tokens
            yield typed_sse_event({"type": "message_start", "message": self._message([], None, None)})
            yield typed_sse_event({"type": "ping"})
            async for block_event in self._events(chain_first(first, outputs)):
                yield typed_sse_event(block_event)
            stop_reason, stop_sequence = self._stop()
            yield typed_sse_event({"type": "message_delta",
                                   "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
                                   "usage": self._usage()})
            yield typed_sse_event({"type": "message_stop"})
        except Exception as exc:
            yield anthropic_error_event(to_api_error(exc))
        finally:
            await close_stream(outputs)
