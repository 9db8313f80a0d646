"""The engine's sampling defaults (the model's generation config) fill what a request leaves unset, on every API."""

from __future__ import annotations

import httpx
import openai
import pytest
from sdk_server import openai_client, serve

LIMIT = 6  # the generation config's max_new_tokens
MESSAGES = [{"role": "user", "content": "Write a long story about a dragon."}]


@pytest.fixture(scope="module")
def base_url():
    """SmolLM2 whose generation config (here the override) asks for greedy sampling and at most LIMIT tokens."""
    with serve(max_model_len=256, override_generation_config={"temperature": 0.0, "max_new_tokens": LIMIT}) as (
            url, _):
        yield url


@pytest.fixture(scope="module")
def client(base_url) -> openai.OpenAI:
    return openai_client(base_url)


def test_chat_without_sampling_values_gets_the_model_defaults(client):
    plain = client.chat.completions.create(model="smol", messages=MESSAGES, max_tokens=50)
    greedy = client.chat.completions.create(model="smol", messages=MESSAGES, max_tokens=50, temperature=0.0)
    assert plain.choices[0].message.content == greedy.choices[0].message.content
    assert plain.usage.completion_tokens == LIMIT  # max_new_tokens limits even a larger max_tokens (vLLM)
    fewer = client.chat.completions.create(model="smol", messages=MESSAGES, max_tokens=2)
    assert fewer.usage.completion_tokens == 2


def test_completions_and_responses_get_them_too(client):
    plain = client.completions.create(model="smol", prompt="Once upon a time", max_tokens=40)
    greedy = client.completions.create(model="smol", prompt="Once upon a time", max_tokens=40, temperature=0.0)
    assert plain.choices[0].text == greedy.choices[0].text and plain.usage.completion_tokens == LIMIT
    response = client.responses.create(model="smol", input="Write a long story about a dragon.")
    assert response.usage.output_tokens == LIMIT


def test_anthropic_messages_get_them_too(base_url):
    def message(**extra) -> dict:
        body = {"model": "smol", "max_tokens": 64, "messages": MESSAGES, **extra}
        r = httpx.post(base_url + "/v1/messages", json=body, timeout=300)
        assert r.status_code == 200, r.text
        return r.json()

    plain, greedy = message(), message(temperature=0.0)
    assert plain["content"] == greedy["content"]
    assert plain["usage"]["output_tokens"] == LIMIT
