"""``POST /v1/completions``: one prompt or a batch (text or token ids), echo, logprobs, JSON or SSE."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from revolta_api.errors import bad_request, to_api_error
from revolta_api.openai.errors import openai_error_event
from revolta_api.openai.protocol import CompletionRequest
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
from revolta_api.streaming import (
    DONE_EVENT,
    json_reply,
    merge_streams,
    prime_streams,
    sse_event,
    sse_response,
)
from revolta_engine.engine.prompt_input import encode_prompt, truncate_prompt
from revolta_engine.outputs import PositionLogprobs

router = APIRouter()

MAX_PROMPTS = 256


@router.post("/v1/completions")
async def create_completion(body: CompletionRequest, request: Request) -> Response:
    """OpenAI (legacy) completions with vLLM's extras; a batch of prompts runs as parallel engine requests."""
    state = get_state(request)
    state.check_model(body.model)
    state.note_unknown_fields("/v1/completions", body.unknown_fields())
    if body.suffix:
        raise bad_request("suffix is not supported.", param="suffix")
    check_logprobs_limit(state.client.info.max_logprobs, logprobs=body.logprobs, prompt_logprobs=body.prompt_logprobs)
    tokenizer = state.client.tokenizer
    max_model_len = state.client.info.max_model_len
    prompts = [(text, truncate_prompt(ids, body.truncate_prompt_tokens, max_model_len))
               for text, ids in _prompts(body, tokenizer)]
    vocab = state.client.info.vocab_size
    params = []
    for _, ids in prompts:
        check_prompt_ids(ids, max_model_len, vocab)
        params.append(sampling_params(
            body, prompt_len=len(ids), max_model_len=max_model_len, requested_max=body.max_tokens,
            defaults=state.client.info.default_sampling, logprobs=body.logprobs, prompt_logprobs=body.logprobs if body.echo and body.logprobs is not None
            else None))
    call = _CompletionCall(state, body, random_id("cmpl", body.request_id), prompts, params)
    if body.stream:
        return sse_response(call.stream(await prime_streams(request, call.streams())))
    return await json_reply(request, call.complete())


def _prompts(body: CompletionRequest, tokenizer: Any) -> list[tuple[str | None, list[int]]]:
    """(text or None, token ids) for each prompt of the request."""
    prompt = body.prompt
    if isinstance(prompt, str):
        items: list = [prompt]
    elif prompt and all(isinstance(p, int) for p in prompt):
        items = [prompt]
    else:
        items = list(prompt)
    if not items:
        raise bad_request("prompt must not be empty.", param="prompt")
    if len(items) > MAX_PROMPTS:
        raise bad_request(f"At most {MAX_PROMPTS} prompts per request, got {len(items)}.", param="prompt")
    out: list[tuple[str | None, list[int]]] = []
    for item in items:
        if isinstance(item, str):
            out.append((item, encode_prompt(tokenizer, item, add_special_tokens=body.add_special_tokens)))
        else:
            out.append((None, list(item)))
    return out


class _CompletionCall:
    """One completions request (possibly several prompts, each with ``n`` choices) in flight."""

    def __init__(self, state: ServerState, body: CompletionRequest, request_id: str,
                 prompts: list[tuple[str | None, list[int]]], params: list[Any]) -> None:
        self.state = state
        self.body = body
        self.request_id = request_id
        self.prompts = prompts
        self.params = params
        self.n = params[0].n
        self.created = int(time.time())
        self.tokenizer = state.client.tokenizer
        self._prompt_lps: list[list | None] = [None] * len(prompts)  # each prompt's logprobs once they arrive
        self._as_ids = logprob_tokens_as_ids(body, state)

    def streams(self) -> list[AsyncIterator]:
        client = self.state.client
        return [client.generate(f"{self.request_id}-{i}", ids, p, self.body.priority)
                for i, ((_, ids), p) in enumerate(zip(self.prompts, self.params, strict=True))]

    def _echo_text(self, i: int) -> str:
        text, ids = self.prompts[i]
        return text if text is not None else self.tokenizer.decode(ids)

    def _logprobs(self, token_ids: list[int], positions: list[PositionLogprobs | None] | None, offset: int
                  ) -> tuple[dict | None, int]:
        if self.body.logprobs is None or positions is None:
            return None, offset
        k = self.body.logprobs
        block: dict[str, list] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        for tid, position in zip(token_ids, positions, strict=False):
            chosen = position.get(tid) if position else None
            text = token_text(self.tokenizer, tid, chosen.decoded_token if chosen else None, self._as_ids)
            block["tokens"].append(text)
            block["text_offset"].append(offset)
            offset += len(text)
            if position is None:
                block["token_logprobs"].append(None)
                block["top_logprobs"].append(None)
                continue
            block["token_logprobs"].append(clamp_logprob(chosen.logprob) if chosen else None)
            top = {token_text(self.tokenizer, alt, lp.decoded_token, self._as_ids): clamp_logprob(lp.logprob)
                   for alt, lp in top_entries(position, k)}
            if chosen is not None:
                top.setdefault(text, clamp_logprob(chosen.logprob))
            block["top_logprobs"].append(top)
        return block, offset

    def _note_prompt_logprobs(self, p: int, out: Any) -> None:
        """Keep prompt ``p``'s logprobs: streamed outputs carry them once, for every choice."""
        if out.prompt_logprobs is not None:
            self._prompt_lps[p] = out.prompt_logprobs

    def _prompt_logprob_block(self, p: int) -> tuple[dict | None, int]:
        ids = self.prompts[p][1]
        positions = self._prompt_lps[p] if self._prompt_lps[p] is not None else [None] * len(ids)
        return self._logprobs(ids, positions, 0)

    def _prompt_logprobs_field(self, p: int) -> list | None:
        """vLLM's ``prompt_logprobs`` of a choice, when the request asked for them."""
        k = self.body.prompt_logprobs
        return None if k is None else encode_prompt_logprobs(self._prompt_lps[p], self.prompts[p][1], k)

    async def complete(self) -> dict:
        """Run every prompt to the end and build the ``text_completion`` object."""
        total = len(self.prompts) * self.n
        texts = [""] * total
        token_ids: list[list[int]] = [[] for _ in range(total)]
        blocks: list[dict | None] = [None] * total
        offsets = [0] * total
        finish: list[Any] = [None] * total
        stop_reasons: list[Any] = [None] * total
        started = [False] * total
        timers = [self.state.metrics.request_timer(params) for params in self.params]
        cached = 0
        async for p, out in merge_streams(self.streams()):
            timers[p].on_output(out)
            self._note_prompt_logprobs(p, out)
            cached += out.num_cached_tokens if out.finished else 0
            for comp in out.outputs:
                i = p * self.n + comp.index
                if not started[i]:
                    started[i] = True
                    if self.body.echo:
                        texts[i] = self._echo_text(p)
                        blocks[i], offsets[i] = self._prompt_logprob_block(p)
                texts[i] += comp.text
                token_ids[i] += comp.token_ids
                block, offsets[i] = self._logprobs(comp.token_ids, comp.logprobs, offsets[i])
                if block is not None:
                    blocks[i] = block if blocks[i] is None else {k: blocks[i][k] + block[k] for k in block}
                finish[i] = comp.finish_reason or finish[i]
                stop_reasons[i] = comp.stop_reason if comp.stop_reason is not None else stop_reasons[i]
        choices = [{"index": i, "text": texts[i], "logprobs": blocks[i], "finish_reason": finish[i],
                    "stop_reason": stop_reasons[i]} for i in range(total)]
        for i, choice in enumerate(choices):
            if self.body.prompt_logprobs is not None:
                choice["prompt_logprobs"] = self._prompt_logprobs_field(i // self.n)
            if self.body.return_token_ids:
                choice["prompt_token_ids"], choice["token_ids"] = self.prompts[i // self.n][1], token_ids[i]
        prompt_tokens = sum(len(ids) for _, ids in self.prompts)
        return {"id": self.request_id, "object": "text_completion", "created": self.created,
                "model": self.state.model_name, "choices": choices,
                "usage": usage(prompt_tokens, sum(map(len, token_ids)), cached)}

    async def stream(self, streams: list[AsyncIterator]) -> AsyncIterator[bytes]:
        """SSE ``text_completion`` chunks; usage chunk when asked; errors as an event; always ``[DONE]``."""
        include_usage, continuous = stream_usage(self.body, self.state)
        total = len(self.prompts) * self.n
        counts = [0] * total
        offsets = [0] * total
        started = [False] * total
        prompt_tokens = sum(len(ids) for _, ids in self.prompts)
        cached = 0
        timers = [self.state.metrics.request_timer(params) for params in self.params]
        done: set[int] = set()
        ids_sent: set[int] = set()  # choices whose prompt token ids went out (return_token_ids)
        try:
            async for p, out in merge_streams(streams):
                timers[p].on_output(out)
                self._note_prompt_logprobs(p, out)
                cached += out.num_cached_tokens if out.finished else 0
                for comp in out.outputs:
                    i = p * self.n + comp.index
                    if i in done:
                        continue
                    if comp.finish_reason is not None:
                        done.add(i)
                    text, block = comp.text, None
                    if not started[i]:
                        started[i] = True
                        if self.body.echo:
                            text = self._echo_text(p) + text
                            block, offsets[i] = self._prompt_logprob_block(p)
                    if not text and not comp.token_ids and comp.finish_reason is None:
                        continue
                    counts[i] += len(comp.token_ids)
                    gen_block, offsets[i] = self._logprobs(comp.token_ids, comp.logprobs, offsets[i])
                    if gen_block is not None:
                        block = gen_block if block is None else {k: block[k] + gen_block[k] for k in block}
                    choice: dict[str, Any] = {"index": i, "text": text, "logprobs": block,
                                              "finish_reason": comp.finish_reason, "stop_reason": comp.stop_reason}
                    if self.body.return_token_ids:
                        if i not in ids_sent:  # vLLM: a choice's prompt ids come once, in its first chunk
                            ids_sent.add(i)
                            choice["prompt_token_ids"] = self.prompts[p][1]
                        choice["token_ids"] = list(comp.token_ids)
                    chunk: dict[str, Any] = {
                        "id": self.request_id, "object": "text_completion", "created": self.created,
                        "model": self.state.model_name, "choices": [choice]}
                    if include_usage:
                        chunk["usage"] = usage(prompt_tokens, sum(counts), cached) if continuous else None
                    yield sse_event(chunk)
            if include_usage:
                yield sse_event({"id": self.request_id, "object": "text_completion", "created": self.created,
                                 "model": self.state.model_name, "choices": [],
                                 "usage": usage(prompt_tokens, sum(counts), cached)})
        except Exception as exc:
            yield openai_error_event(to_api_error(exc))
        yield DONE_EVENT
