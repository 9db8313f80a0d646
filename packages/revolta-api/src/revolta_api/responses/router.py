"""OpenAI's Responses API: ``POST /v1/responses`` run through the chat pipeline (templates, tool-call and
reasoning parsers, constrained decoding) and answered as a ``response`` object or its SSE event sequence;
``GET`` / ``DELETE /v1/responses/{id}`` for the responses kept in memory (``store``, see :mod:`.store`);
``background: true`` answers at once with a queued response that generates on (``POST .../{id}/cancel`` stops it)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from revolta_api.chat_output import ChatOutputParser
from revolta_api.chat_parsing import constrain_after_reasoning, get_parsing, output_constraint
from revolta_api.errors import ApiError, bad_request, to_api_error
from revolta_api.openai.chat_tools import request_tools, template_messages
from revolta_api.openai.errors import openai_error_event
from revolta_api.openai.protocol import ChatCompletionRequest
from revolta_api.openai.serving import check_prompt_ids, sampling_params
from revolta_api.parsed_call import ParsedCall
from revolta_api.responses.items import ItemAssembler
from revolta_api.responses.protocol import ResponsesRequest, input_messages, output_messages, to_chat_request
from revolta_api.state import ServerState, get_state
from revolta_api.streaming import (
    close_stream,
    json_reply,
    json_response,
    prime_streams,
    sse_response,
    typed_sse_event,
)
from revolta_engine.engine.prompt_input import encode_prompt
from revolta_engine.outputs import RequestOutput
from revolta_engine.sampling_params import SamplingParams

router = APIRouter()


@router.post("/v1/responses")
async def create_response(body: ResponsesRequest, request: Request) -> Response:
    """OpenAI Responses (streaming and not); kept in memory for ``previous_response_id`` unless ``store`` is
    false."""
    state = get_state(request)
    state.check_model(body.model)
    state.note_unknown_fields("/v1/responses", body.unknown_fields())
    if body.background and body.store is False:
        raise bad_request("A background response must be stored (store cannot be false): it is read back with "
                          "GET /v1/responses/{id}.", param="background")
    if body.background and body.stream:
        raise bad_request("Background responses are not streamed here: poll GET /v1/responses/{id} instead.",
                          param="stream")
    history: list[dict[str, Any]] = []
    if body.previous_response_id is not None:
        stored = state.responses.get(body.previous_response_id)
        if stored is None:
            raise ApiError(404, f"Previous response with id '{body.previous_response_id}' not found (responses are "
                                "kept in this server's memory, the most recent ones only).", "not_found",
                           param="previous_response_id")
        history = stored.conversation
    conversation = history + input_messages(body)
    chat = to_chat_request(body, conversation)
    parsing = get_parsing(request)
    plan = request_tools(chat, parsing)
    client = state.client
    prompt = state.renderer.render(template_messages(chat), add_generation_prompt=True, tools=plan.tools)
    prompt_ids = encode_prompt(client.tokenizer, prompt, param="input")
    check_prompt_ids(prompt_ids, client.info.max_model_len, client.info.vocab_size, param="input")
    params = sampling_params(chat, prompt_len=len(prompt_ids), max_model_len=client.info.max_model_len,
                             requested_max=chat.max_completion_tokens, max_param=None, logprobs=None,
                             defaults=client.info.default_sampling)
    params.structured_outputs = output_constraint(
        plan.forced, params.structured_outputs, conflict="tool_choice 'required' or a named function already "
        "constrains the output; it cannot be combined with text.format.")
    parser = parsing.output_parser(client.tokenizer, prompt_ids=prompt_ids, tools=plan.tools,
                                   thinking=state.renderer.thinking(None),
                                   stop=list(params.stop or []), tool_call_parser=plan.parser)
    constrain_after_reasoning(params, parser, parsing)
    call = _ResponseCall(state, body, chat, prompt_ids, params, parser, conversation)
    if body.background:
        return json_response(call.start_in_background())
    if body.stream:
        stream, = await prime_streams(request, [client.generate(call.id, prompt_ids, params, chat.priority)])
        return sse_response(call.stream(stream))
    return await json_reply(request, call.complete())


@router.get("/v1/responses/{response_id}")
async def get_response(response_id: str, request: Request) -> Response:
    """A stored response (a background one still generating: its output so far)."""
    current = get_state(request).responses.current(response_id)
    if current is None:
        raise ApiError(404, f"No response with id '{response_id}' is stored here.", "not_found")
    return json_response(current)


@router.post("/v1/responses/{response_id}/cancel")
async def cancel_response(response_id: str, request: Request) -> Response:
    """Stop a background response; answers it as it stands then (``cancelled``, or already finished)."""
    store = get_state(request).responses
    stored = store.get(response_id)
    if stored is None:
        raise ApiError(404, f"No response with id '{response_id}' is stored here.", "not_found")
    if not stored.response.get("background"):
        raise bad_request("Only background responses can be cancelled.", param="response_id")
    await store.cancel(response_id)
    stored = store.get(response_id)
    assert stored is not None  # a cancelled response stores itself before its task ends
    return json_response(stored.response)


@router.delete("/v1/responses/{response_id}")
async def delete_response(response_id: str, request: Request) -> Response:
    """Forget a stored response (a background one still generating is stopped first)."""
    store = get_state(request).responses
    await store.cancel(response_id)
    if not store.delete(response_id):
        raise ApiError(404, f"No response with id '{response_id}' is stored here.", "not_found")
    return json_response({"id": response_id, "object": "response", "deleted": True})


class _ResponseCall(ParsedCall):
    """One response in flight: engine deltas -> parser events -> output items."""

    def __init__(self, state: ServerState, body: ResponsesRequest, chat: ChatCompletionRequest, prompt_ids: list[int],
                 params: SamplingParams, parser: ChatOutputParser, conversation: list[dict[str, Any]]) -> None:
        self.body, self.chat = body, chat
        self.conversation = conversation
        self.store = body.store is not False  # OpenAI keeps responses unless told not to
        self.prompt_ids, self.params = prompt_ids, params
        self.id = "resp_" + uuid.uuid4().hex[:24]
        self.created = int(time.time())
        self.items = ItemAssembler()
        super().__init__(state, parser, self.items, single_call=body.parallel_tool_calls is False, params=params)
        self.cached_tokens = 0
        self._sequence = 0
        self._status = "queued"  # a background response's status while it runs

    def response(self, status: str) -> dict[str, Any]:
        """The ``response`` object as it stands."""
        incomplete = status == "incomplete"
        return {
            "id": self.id, "object": "response", "created_at": self.created, "status": status,
            "model": self.state.model_name, "output": self.items.snapshot(), "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
            "instructions": self.body.instructions, "max_output_tokens": self.body.max_output_tokens,
            "temperature": self.body.temperature, "top_p": self.body.top_p, "tools": self.body.tools or [],
            "tool_choice": self.body.tool_choice or "auto", "parallel_tool_calls": self.body.parallel_tool_calls
            is not False, "text": self.body.text or {"format": {"type": "text"}}, "metadata": self.body.metadata or {},
            "store": self.store, "previous_response_id": self.body.previous_response_id, "reasoning": None,
            "truncation": "disabled", "background": self.body.background,
            "user": self.body.user,
            "usage": {"input_tokens": len(self.prompt_ids),
                      "input_tokens_details": {"cached_tokens": self.cached_tokens},
                      "output_tokens": self.output_tokens, "output_tokens_details": {"reasoning_tokens": 0},
                      "total_tokens": len(self.prompt_ids) + self.output_tokens}
            if status not in ("queued", "in_progress") else None,
        }

    def _final_status(self) -> str:
        return "incomplete" if self.finish_reason == "length" and self.parser.stopped_by is None else "completed"

    def _finished(self) -> dict[str, Any]:
        """The final response object, kept for later turns unless ``store`` is false."""
        response = self.response(self._final_status())
        if self.store:
            self.state.responses.put(response, self.conversation + output_messages(self.items.items))
        return response

    def start_in_background(self) -> dict[str, Any]:
        """Store this response as queued, generate it in a task of the store, and return the queued object."""
        queued = self.response("queued")
        self.state.responses.put(queued, self.conversation)
        self.state.responses.run_in_background(self.id, self._generate_in_background(),
                                               live=lambda: self.response(self._status))
        return queued

    async def _generate_in_background(self) -> None:
        """Generate to the end; what happens (in progress, finished, cancelled, failed) is stored as it happens."""
        store = self.state.responses
        self._status = "in_progress"
        store.put(self.response("in_progress"), self.conversation)
        try:
            await self.complete()
        except asyncio.CancelledError:
            store.put(self.response("cancelled"), self.conversation)
            raise
        except Exception as exc:
            error = to_api_error(exc)
            failed = self.response("failed")
            failed["error"] = {"code": error.code or error.kind, "message": error.message}
            store.put(failed, self.conversation)

    def _on_output(self, out: RequestOutput) -> None:
        self.cached_tokens = out.num_cached_tokens

    async def complete(self) -> dict[str, Any]:
        """Run to the end and build the ``response`` object."""
        await self._run(self.state.client.generate(self.id, self.prompt_ids, self.params, self.chat.priority))
        return self._finished()

    def _sse(self, payload: dict[str, Any]) -> bytes:
        payload["sequence_number"] = self._sequence
        self._sequence += 1
        return typed_sse_event(payload)

    async def stream(self, outputs: AsyncIterator[RequestOutput]) -> AsyncIterator[bytes]:
        """The Responses SSE sequence; an error after the start becomes an ``error`` event that ends it."""
        try:
            yield self._sse({"type": "response.created", "response": self.response("in_progress")})
            yield self._sse({"type": "response.in_progress", "response": self.response("in_progress")})
            async for event in self._events(outputs):
                yield self._sse(event)
            response = self._finished()
            kind = "response.incomplete" if response["status"] == "incomplete" else "response.completed"
            yield self._sse({"type": kind, "response": response})
        except Exception as exc:
            yield openai_error_event(to_api_error(exc))
        finally:
            await close_stream(outputs)
