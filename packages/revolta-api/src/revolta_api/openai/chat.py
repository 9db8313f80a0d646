"""``POST /v1/chat/completions``: render the chat template, tokenize, generate, answer as JSON or SSE chunks."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from revolta_api.chat_parsing import constrain_after_reasoning, get_parsing, output_constraint
from revolta_api.errors import bad_request, to_api_error
from revolta_api.openai.chat_tools import ChoiceOutput, request_tools, template_messages
from revolta_api.openai.errors import openai_error_event
from revolta_api.openai.protocol import ChatCompletionRequest
from revolta_api.openai.serving import (
    check_logprobs_limit,
    check_prompt_ids,
    clamp_logprob,
    encode_prompt_logprobs,
    logprob_tokens_as_ids,
    random_id,
    sampling_params,
    stream_usage,
    token_text,
    top_entries,
    usage,
)
from revolta_api.state import ServerState, get_state
from revolta_api.streaming import DONE_EVENT, json_reply, prime_streams, sse_event, sse_response
from revolta_engine.engine.prompt_input import encode_prompt, truncate_prompt
from revolta_engine.outputs import PositionLogprobs, RequestOutput

router = APIRouter()


@router.post("/v1/chat/completions")
async def create_chat_completion(body: ChatCompletionRequest, request: Request) -> Response:
    """OpenAI chat completions (streaming and not), with vLLM's sampling extras."""
    state = get_state(request)
    state.check_model(body.model)
    state.note_unknown_fields("/v1/chat/completions", body.unknown_fields())
    if body.top_logprobs and not body.logprobs:
        raise bad_request("top_logprobs needs logprobs to be true.", param="top_logprobs")
    client = state.client
    check_logprobs_limit(client.info.max_logprobs, top_logprobs=body.top_logprobs,
                         prompt_logprobs=body.prompt_logprobs)
    parsing = get_parsing(request)
    plan = request_tools(body, parsing)
    tools = plan.tools
    messages = template_messages(body)
    prompt = state.renderer.render(
        messages, add_generation_prompt=body.add_generation_prompt and not body.continue_final_message,
        continue_final_message=body.continue_final_message, chat_template=body.chat_template,
        template_kwargs=body.chat_template_kwargs, tools=tools, documents=body.documents)
    prompt_ids = truncate_prompt(encode_prompt(client.tokenizer, prompt, param="messages"), body.truncate_prompt_tokens,
                                 client.info.max_model_len)
    check_prompt_ids(prompt_ids, client.info.max_model_len, client.info.vocab_size, param="messages")
    params = sampling_params(
        body, prompt_len=len(prompt_ids), max_model_len=client.info.max_model_len,
        requested_max=body.max_completion_tokens or body.max_tokens,
        max_param="max_completion_tokens" if body.max_completion_tokens else "max_tokens",
        defaults=client.info.default_sampling, logprobs=(body.top_logprobs or 0) if body.logprobs else None)
    params.structured_outputs = output_constraint(
        plan.forced, params.structured_outputs, conflict="tool_choice 'required' or a named function already "
        "constrains the output; it cannot be combined with response_format or structured_outputs.")
    request_id = random_id("chatcmpl", body.request_id)
    call = _ChatCall(state, body, request_id, prompt_ids, params)
    if tools or parsing.reasoning_parser:
        thinking = state.renderer.thinking(body.chat_template_kwargs)
        call.choices = [ChoiceOutput(parsing.output_parser(
            client.tokenizer, prompt_ids=prompt_ids, tools=tools, thinking=thinking,
            stop=list(params.stop or []), tool_call_parser=plan.parser),
            single_call=body.parallel_tool_calls is False) for _ in range(params.n)]
        constrain_after_reasoning(params, call.choices[0].parser, parsing)
    if body.stream:
        stream, = await prime_streams(request, [client.generate(request_id, prompt_ids, params, body.priority)])
        return sse_response(call.stream(stream))
    return await json_reply(request, call.complete())


class _ChatCall:
    """One chat completion request in flight."""

    def __init__(self, state: ServerState, body: ChatCompletionRequest, request_id: str, prompt_ids: list[int],
                 params: Any) -> None:
        self.state = state
        self.body = body
        self.request_id = request_id
        self.prompt_ids = prompt_ids
        self.params = params
        self.created = int(time.time())
        self.top_logprobs = body.top_logprobs or 0
        self.tokenizer = state.client.tokenizer
        self.choices: list[ChoiceOutput] | None = None  # tool / reasoning parsing, when the request needs it
        self._as_ids = logprob_tokens_as_ids(body, state)
        self._token_ids = bool(body.return_token_ids)
        self.echo = _echo_text(body)

    def _logprobs(self, token_ids: list[int], positions: list[PositionLogprobs] | None) -> list[dict] | None:
        if not self.body.logprobs or positions is None:
            return None
        content = []
        for tid, position in zip(token_ids, positions, strict=False):
            chosen = position.get(tid)
            text = token_text(self.tokenizer, tid, chosen.decoded_token if chosen else None, self._as_ids)
            content.append({
                "token": text, "logprob": clamp_logprob(chosen.logprob if chosen else float("-inf")),
                "bytes": list(text.encode("utf-8")),
                "top_logprobs": [
                    {"token": (t := token_text(self.tokenizer, alt, lp.decoded_token, self._as_ids)),
                     "logprob": clamp_logprob(lp.logprob), "bytes": list(t.encode("utf-8"))}
                    for alt, lp in top_entries(position, self.top_logprobs)],
            })
        return content

    async def complete(self) -> dict:
        """Run to the end and build the ``chat.completion`` object."""
        n = self.params.n
        texts = [""] * n
        token_ids: list[list[int]] = [[] for _ in range(n)]
        logprobs: list[list[dict]] = [[] for _ in range(n)]
        finish: list[str | None] = [None] * n
        stop_reasons: list[Any] = [None] * n
        cached = 0
        prompt_lps = None
        timer = self.state.metrics.request_timer(self.params)
        async for out in self.state.client.generate(self.request_id, self.prompt_ids, self.params,
                                                   self.body.priority):
            timer.on_output(out)
            cached = out.num_cached_tokens
            prompt_lps = out.prompt_logprobs if out.prompt_logprobs is not None else prompt_lps
            for comp in out.outputs:
                i = comp.index
                texts[i] += comp.text
                token_ids[i] += comp.token_ids
                entries = self._logprobs(comp.token_ids, comp.logprobs)
                if entries:
                    logprobs[i].extend(entries)
                finish[i] = comp.finish_reason or finish[i]
                stop_reasons[i] = comp.stop_reason if comp.stop_reason is not None else stop_reasons[i]
                if self.choices:
                    self.choices[i].feed(comp)
                    finish[i], stop_reasons[i] = self.choices[i].finish_reason, self.choices[i].stop_reason
            if self.choices and all(c.stopped for c in self.choices):
                break  # every choice hit a stop string after its thinking: leaving aborts the request
        choices = [{
            "index": i, "message": self.choices[i].message() if self.choices else
            {"role": "assistant", "content": texts[i]},
            "logprobs": {"content": logprobs[i]} if self.body.logprobs else None,
            "finish_reason": finish[i], "stop_reason": stop_reasons[i],
        } for i in range(n)]
        for i, choice in enumerate(choices):
            if self.echo:
                choice["message"]["content"] = self.echo + (choice["message"].get("content") or "")
            if self._token_ids:
                choice["token_ids"] = token_ids[i]
        reply = {"id": self.request_id, "object": "chat.completion", "created": self.created,
                 "model": self.state.model_name, "choices": choices,
                 "usage": usage(len(self.prompt_ids), sum(map(len, token_ids)), cached)}
        if self._token_ids:
            reply["prompt_token_ids"] = self.prompt_ids
        if self.body.prompt_logprobs is not None:
            reply["prompt_logprobs"] = encode_prompt_logprobs(prompt_lps, self.prompt_ids, self.body.prompt_logprobs)
        return reply

    def _chunk(self, choices: list[dict], usage_value: Any = None, with_usage: bool = False,
               first: bool = False) -> bytes:
        chunk: dict[str, Any] = {"id": self.request_id, "object": "chat.completion.chunk",
                                 "created": self.created, "model": self.state.model_name, "choices": choices}
        if first and self._token_ids:
            chunk["prompt_token_ids"] = self.prompt_ids  # vLLM: once, in the first chunk
        if with_usage:
            chunk["usage"] = usage_value
        return sse_event(chunk)

    async def stream(self, outputs: AsyncIterator[RequestOutput]) -> AsyncIterator[bytes]:
        """SSE chunks as OpenAI sends them; errors after the start become an error event; always ``[DONE]``."""
        include_usage, continuous = stream_usage(self.body, self.state)
        n = self.params.n
        counts = [0] * n
        prompt_len = len(self.prompt_ids)
        cached = 0
        done: set[int] = set()
        held_ids: list[list[int]] = [[] for _ in range(n)]  # token ids of text the parsers still hold back
        try:
            for i in range(n):
                yield self._chunk([{"index": i, "delta": {"role": "assistant", "content": ""},
                                    "logprobs": None, "finish_reason": None}],
                                  usage(prompt_len, 0) if continuous else None, include_usage, first=i == 0)
                if self.echo:
                    yield self._chunk([{"index": i, "delta": {"content": self.echo}, "logprobs": None,
                                        "finish_reason": None}], usage(prompt_len, 0) if continuous else None,
                                      include_usage)
            timer = self.state.metrics.request_timer(self.params)
            async for out in outputs:
                timer.on_output(out)
                cached = out.num_cached_tokens
                for comp in out.outputs:
                    if comp.index in done or (not comp.token_ids and not comp.text and comp.finish_reason is None):
                        continue
                    if comp.finish_reason is not None:
                        done.add(comp.index)
                    counts[comp.index] += len(comp.token_ids)
                    held_ids[comp.index] += comp.token_ids
                    entries = self._logprobs(comp.token_ids, comp.logprobs)
                    delta = {"content": comp.text} if comp.text else {}
                    if self.choices:
                        parsed = self.choices[comp.index]
                        delta = parsed.feed(comp)
                        if parsed.finish_reason is not None:
                            done.add(comp.index)
                            comp.finish_reason, comp.stop_reason = parsed.finish_reason, parsed.stop_reason
                        elif not delta and entries is None:
                            continue  # the parsers hold this text back for now
                    choice = {"index": comp.index, "delta": delta,
                              "logprobs": {"content": entries} if entries is not None else None,
                              "finish_reason": comp.finish_reason}
                    if comp.finish_reason is not None:
                        choice["stop_reason"] = comp.stop_reason
                    if self._token_ids:
                        choice["token_ids"], held_ids[comp.index] = held_ids[comp.index], []
                    yield self._chunk([choice], usage(prompt_len, sum(counts), cached) if continuous else None,
                                      include_usage)
                if self.choices and all(c.stopped for c in self.choices):
                    break
            if include_usage:
                yield self._chunk([], usage(prompt_len, sum(counts), cached), True)
        except Exception as exc:
            yield openai_error_event(to_api_error(exc))
        yield DONE_EVENT


def _echo_text(body: ChatCompletionRequest) -> str:
    """vLLM's chat ``echo``: the final message's text when it is the assistant's (the reply continues it)."""
    last = body.messages[-1]
    if not body.echo or last.role != "assistant" or last.content is None:
        return ""
    if isinstance(last.content, str):
        return last.content
    return "\n".join(part.text for part in last.content)
