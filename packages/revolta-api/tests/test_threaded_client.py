"""The in-process client (engine on a background thread) behind a real uvicorn server and the openai SDK."""

from __future__ import annotations

import socket
import threading
import time

import openai
import pytest
import uvicorn

from revolta_api import build_app
from revolta_api.clients.threaded import ThreadedEngineClient
from revolta_engine import EngineArgs, LLMEngine


@pytest.fixture(scope="module")
def base_url():
    engine = LLMEngine(EngineArgs.from_kwargs(max_model_len=256, kv_cache_memory_bytes=32 << 20))
    app = build_app(ThreadedEngineClient(engine), served_model_name="smol")
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    server.should_exit = True
    thread.join(30)
    assert not thread.is_alive()


def test_chat_and_stream_through_the_threaded_client(base_url):
    client = openai.OpenAI(base_url=base_url + "/v1", api_key="x", max_retries=0, timeout=300)
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    reply = client.chat.completions.create(model="smol", messages=messages, max_tokens=10, temperature=0)
    assert "Paris" in reply.choices[0].message.content
    chunks = list(client.chat.completions.create(model="smol", messages=messages, max_tokens=10, temperature=0,
                                                 stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == reply.choices[0].message.content
