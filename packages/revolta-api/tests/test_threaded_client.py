"""The in-process client (engine on a background thread) behind a real uvicorn server and the openai SDK."""

from __future__ import annotations

import pytest
from sdk_server import openai_client, serve


@pytest.fixture(scope="module")
def base_url():
    with serve(max_model_len=256) as (url, _):
        yield url


def test_chat_and_stream_through_the_threaded_client(base_url):
    client = openai_client(base_url)
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    reply = client.chat.completions.create(model="smol", messages=messages, max_tokens=10, temperature=0)
    assert "Paris" in reply.choices[0].message.content
    chunks = list(client.chat.completions.create(model="smol", messages=messages, max_tokens=10, temperature=0,
                                                 stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == reply.choices[0].message.content
