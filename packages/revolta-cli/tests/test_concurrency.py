"""Many concurrent streams finish correctly; a client that leaves mid-stream frees its KV blocks."""

from __future__ import annotations

import asyncio
import re

import httpx
import openai
from conftest import SMOL_NAME
from server_process import wait_until

PROMPT = [{"role": "user", "content": "Name a color."}]


def _metric(text: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)}\{{[^}}]*\}} (\S+)$", text, re.MULTILINE)
    assert match, name
    return float(match.group(1))


def test_64_concurrent_streaming_clients_all_finish_with_the_same_greedy_answer(smol_server):
    # Completions with a short prompt: 64 chat prompts (with SmolLM2's system prompt) would spend the
    # test's time in prefill on a 2-core CPU; the streaming path is the same.
    sync = openai.OpenAI(base_url=smol_server.url + "/v1", api_key="x", max_retries=0, timeout=600)
    expected = sync.completions.create(model=SMOL_NAME, prompt="My favourite colour is", max_tokens=4,
                                       temperature=0, extra_body={"ignore_eos": True})
    expected_text = expected.choices[0].text

    async def one(client: openai.AsyncOpenAI) -> tuple[str, int, str | None]:
        stream = await client.completions.create(
            model=SMOL_NAME, prompt="My favourite colour is", max_tokens=4, temperature=0, stream=True,
            stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
        text, usage, finish = "", 0, None
        async for chunk in stream:
            if chunk.choices:
                text += chunk.choices[0].text or ""
                finish = chunk.choices[0].finish_reason or finish
            if chunk.usage:
                usage = chunk.usage.completion_tokens
        return text, usage, finish

    async def main() -> list:
        client = openai.AsyncOpenAI(base_url=smol_server.url + "/v1", api_key="x", max_retries=0, timeout=600,
                                    http_client=httpx.AsyncClient(limits=httpx.Limits(max_connections=80)))
        async with client:
            return await asyncio.gather(*(one(client) for _ in range(64)))

    results = asyncio.run(main())
    assert len(results) == 64
    assert all(r == (expected_text, 4, "length") for r in results), results[:3]


def test_disconnect_mid_stream_aborts_and_frees_kv(smol_server):
    body = {"model": SMOL_NAME, "messages": PROMPT, "max_tokens": 400, "stream": True, "ignore_eos": True}
    with httpx.stream("POST", smol_server.url + "/v1/chat/completions", json=body, timeout=300) as response:
        # Hold the line iterator: a dropped one is closed at once, and closing it closes the connection, which
        # would abort the request before the gauge is read.
        lines = response.iter_lines()
        chunks = 0
        for line in lines:
            if line.startswith("data: ") and '"content":"' in line and '"content":""' not in line:
                chunks += 1
            if chunks >= 2:
                break
        running = _metric(httpx.get(smol_server.url + "/metrics").text, "revolta:num_requests_running")
        assert running == 1
    # leaving the with-block closed the connection mid-stream

    def freed() -> bool:
        text = httpx.get(smol_server.url + "/metrics").text
        return (_metric(text, "revolta:kv_cache_usage_perc") == 0.0
                and _metric(text, "revolta:num_requests_running") == 0.0)

    assert wait_until(freed, timeout=30), httpx.get(smol_server.url + "/metrics").text


def test_disconnect_while_waiting_for_a_non_streaming_answer_aborts_it(smol_server):
    body = {"model": SMOL_NAME, "messages": PROMPT, "max_tokens": 400, "ignore_eos": True}
    try:
        httpx.post(smol_server.url + "/v1/chat/completions", json=body, timeout=3)
    except httpx.ReadTimeout:
        pass

    def freed() -> bool:
        text = httpx.get(smol_server.url + "/metrics").text
        return (_metric(text, "revolta:kv_cache_usage_perc") == 0.0
                and _metric(text, "revolta:num_requests_running") == 0.0)

    assert wait_until(freed, timeout=30)
