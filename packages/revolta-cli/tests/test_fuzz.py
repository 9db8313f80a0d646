"""Schema-driven fuzzing: bodies generated from the server's own OpenAPI document, plus arbitrary JSON.

Whatever the body, the answer is a 2xx or a 4xx in OpenAI's shape, never a 5xx, and never a hang
(every request has a timeout; a streamed answer must reach ``[DONE]``).
"""

from __future__ import annotations

import json

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schema_strategy import from_schema

ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/tokenize", "/detokenize")
FUZZ_SETTINGS = settings(max_examples=80, deadline=None, derandomize=True, database=None,
                         suppress_health_check=list(HealthCheck))


def _resolve(node, components):
    """Inline every ``$ref`` (the schemas are not recursive)."""
    if isinstance(node, dict):
        if "$ref" in node:
            return _resolve(components[node["$ref"].rsplit("/", 1)[1]], components)
        return {k: _resolve(v, components) for k, v in node.items()}
    if isinstance(node, list):
        return [_resolve(v, components) for v in node]
    return node


@pytest.fixture(scope="module")
def schemas(tiny_server) -> dict[str, dict]:
    doc = httpx.get(tiny_server.url + "/openapi.json").json()
    components = doc["components"]["schemas"]
    out = {}
    for path in ENDPOINTS:
        body = doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
        out[path] = _resolve(body, components)
    return out


def _send(url: str, body) -> httpx.Response:
    with httpx.Client(timeout=httpx.Timeout(60.0)) as http:
        response = http.post(url, json=body)
        if response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream"):
            assert response.text.rstrip().endswith("data: [DONE]"), response.text[-300:]
            for line in response.text.splitlines():
                if line.startswith("data: {"):
                    event = json.loads(line[6:])
                    assert "error" not in event or event["error"]["type"] != "server_error", event
        return response


def _check(response: httpx.Response, body) -> None:
    assert response.status_code < 500, (body, response.text)
    if response.status_code >= 400:
        error = response.json()["error"]
        assert error["message"] and error["type"] == "invalid_request_error", (body, error)


@pytest.mark.parametrize("path", ENDPOINTS)
def test_schema_fuzz_never_5xx_or_hangs(tiny_server, schemas, path):
    @FUZZ_SETTINGS
    @given(body=from_schema(schemas[path]), keep_model=st.booleans())
    def run(body, keep_model):
        if isinstance(body, dict):
            if keep_model:
                body["model"] = "tiny"  # otherwise most bodies would stop at the 404 for an unknown model
            if isinstance(body.get("n"), int) and body["n"] > 2:
                body["n"] = 2  # keeps the run short on a CPU; n up to the limit is the same code path
        _check(_send(tiny_server.url + path, body), body)

    run()


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner,
                                                                                 max_size=4), max_leaves=12)
FIELDS = st.sampled_from(["model", "messages", "prompt", "n", "max_tokens", "temperature", "top_p", "stop",
                          "seed", "logprobs", "top_logprobs", "stream", "stream_options", "echo", "top_k",
                          "min_tokens", "stop_token_ids", "chat_template_kwargs", "tokens", "ignore_eos"])


@pytest.mark.parametrize("path", ENDPOINTS[:2])
def test_wrong_types_are_4xx(tiny_server, path):
    base = ({"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
            if path.endswith("chat/completions") else {"model": "tiny", "prompt": "hi", "max_tokens": 3})

    @FUZZ_SETTINGS
    @given(overrides=st.dictionaries(FIELDS, JSON, max_size=3))
    def run(overrides):
        body = {**base, **overrides}
        _check(_send(tiny_server.url + path, body), body)

    run()
