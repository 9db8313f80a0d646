"""A real uvicorn server on 127.0.0.1 over the default SmolLM2 (engine on a thread), for the SDK tests."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anthropic
import httpx
import openai
import uvicorn

from revolta_api import build_app
from revolta_api.chat_parsing import ChatParsing
from revolta_api.clients.threaded import ThreadedEngineClient
from revolta_api.state import ServingOptions
from revolta_engine import EngineArgs, LLMEngine


@contextmanager
def serve(api_key: str | None = None, parsing: ChatParsing | None = None, max_model_len: int = 512,
          chat_template: str | None = None, options: ServingOptions | None = None,
          **engine_args: Any) -> Iterator[tuple[str, Any]]:
    """Yield (base URL, engine client) of a server running until the block ends (``engine_args``: more
    ``EngineArgs``, e.g. ``model``)."""
    engine = LLMEngine.from_engine_args(EngineArgs.from_kwargs(max_model_len=max_model_len, kv_cache_memory_bytes=32 << 20,
                                              **engine_args))
    client = ThreadedEngineClient(engine)
    app = build_app(client, served_model_name="smol", api_key=api_key, parsing=parsing,
                    chat_template=chat_template, options=options)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", client
    finally:
        server.should_exit = True
        thread.join(30)


def openai_client(url: str, timeout: float = 300) -> openai.OpenAI:
    """The ``openai`` SDK on the server at ``url`` (its base URL), without retries."""
    return openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=timeout)


def anthropic_client(url: str, timeout: float = 300) -> anthropic.Anthropic:
    """The ``anthropic`` SDK on the server at ``url``, without retries."""
    return anthropic.Anthropic(base_url=url, api_key="x", max_retries=0, timeout=timeout)


def raw_events(url: str, body: dict, key: str | None = None) -> list[tuple[str, dict]]:
    """(event name, data) pairs of a streamed Messages response, read off the wire."""
    events = []
    headers = {"x-api-key": key} if key else {}
    with httpx.stream("POST", url + "/v1/messages", json={**body, "stream": True}, headers=headers,
                      timeout=300) as reply:
        assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/event-stream")
        name = None
        for line in reply.iter_lines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                events.append((name, json.loads(line[6:])))
    return events
