"""Every error path answers in OpenAI's shape with the right status, and the server keeps serving."""

from __future__ import annotations

import httpx
import openai
import pytest
from conftest import SMOL_NAME

MSG = [{"role": "user", "content": "Hi"}]


@pytest.fixture(scope="module")
def client(smol_server) -> openai.OpenAI:
    return openai.OpenAI(base_url=smol_server.url + "/v1", api_key="unused", max_retries=0, timeout=300)


def _assert_openai_error(body: dict, param: str | None = None) -> dict:
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"]
    if param is not None:
        assert error["param"] == param
    return error


@pytest.mark.parametrize("kwargs, param", [
    ({"temperature": -1}, "temperature"),
    ({"top_p": 1.5}, "top_p"),
    ({"n": 0}, "n"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"top_logprobs": 2}, "top_logprobs"),  # without logprobs=True
    ({"top_logprobs": 50, "logprobs": True}, "top_logprobs"),
    ({"seed": 2**70}, "seed"),
    ({"extra_body": {"min_tokens": 10}, "max_tokens": 2}, "min_tokens"),
    ({"extra_body": {"repetition_penalty": 0}}, "repetition_penalty"),
    ({"extra_body": {"stop_token_ids": [-1]}}, None),
])
def test_invalid_chat_parameters_are_400(client, kwargs, param):
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=SMOL_NAME, messages=MSG, **kwargs)
    assert info.value.status_code == 400
    error = _assert_openai_error(info.value.response.json(), None)
    assert error["type"] == "invalid_request_error"
    if param is not None:
        assert param in error["param"]


@pytest.mark.parametrize("body", [
    {"model": SMOL_NAME},  # no messages
    {"model": SMOL_NAME, "messages": []},
    {"model": SMOL_NAME, "messages": [{"role": "wizard", "content": "x"}]},
    {"model": SMOL_NAME, "messages": "not a list"},
    {"model": SMOL_NAME, "messages": MSG, "max_tokens": "many"},
    {"model": SMOL_NAME, "messages": MSG, "continue_final_message": True},
])
def test_malformed_chat_bodies_are_400(smol_server, body):
    r = httpx.post(smol_server.url + "/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 400, r.text
    _assert_openai_error(r.json())


def test_an_image_part_is_400_saying_text_only(smol_server):
    content = [{"type": "text", "text": "What is this?"},
               {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]
    r = httpx.post(smol_server.url + "/v1/chat/completions", json={"model": SMOL_NAME, "messages": [
        {"role": "user", "content": content}]})
    assert r.status_code == 400
    error = _assert_openai_error(r.json(), "messages.0.content")
    assert "'image_url' are not supported" in error["message"] and "more problem" not in error["message"]


def test_non_json_body_is_400(smol_server):
    r = httpx.post(smol_server.url + "/v1/chat/completions", content=b"{not json",
                   headers={"content-type": "application/json"})
    assert r.status_code == 400
    error = _assert_openai_error(r.json())
    assert "not valid JSON" in error["message"] and error["param"] is None


def test_browser_pages_of_any_origin_may_call_by_default(smol_server):
    """CORS as vLLM sets it up by default: any origin, method and header."""
    pre = httpx.options(smol_server.url + "/v1/messages", headers={
        "Origin": "http://localhost:3000", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type,x-api-key,anthropic-version"})
    assert pre.status_code == 200 and pre.headers["access-control-allow-origin"] == "*"
    r = httpx.get(smol_server.url + "/v1/models", headers={"Origin": "http://localhost:3000"})
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "*"


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
def test_max_tokens_past_the_context_is_400_as_in_vllm(client, field):
    """vLLM's chat and completions servers refuse a maximum that cannot fit after the prompt (this server has a
    512-token context) instead of quietly capping it; the message gives both lengths."""
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=SMOL_NAME, messages=MSG, **{field: 600})
    error = _assert_openai_error(info.value.response.json(), field)
    assert "too large: 600" in error["message"] and "512" in error["message"]
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=SMOL_NAME, prompt="Hi", max_tokens=512, stream=True)
    _assert_openai_error(info.value.response.json(), "max_tokens")
    fits = client.completions.create(model=SMOL_NAME, prompt="Hi", max_tokens=2)
    assert fits.usage.completion_tokens <= 2


@pytest.mark.parametrize("prompt", ["", [], [10**9], [[1, 2], []]])
def test_invalid_completion_prompts_are_400(client, prompt):
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=SMOL_NAME, prompt=prompt, max_tokens=2)
    _assert_openai_error(info.value.response.json())


def test_too_long_prompt_says_both_lengths(client):
    long_text = "hello " * 600
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=SMOL_NAME, messages=[{"role": "user", "content": long_text}])
    message = info.value.response.json()["error"]["message"]
    assert "512" in message
    prompt_len = int(message.split("the prompt has ")[1].split()[0])
    assert prompt_len > 512
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=SMOL_NAME, prompt=long_text, max_tokens=1, stream=True)
    assert "512" in info.value.response.json()["error"]["message"]


def test_unknown_model_is_404(client):
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="gpt-4o", messages=MSG, max_tokens=1)
    error = _assert_openai_error(info.value.response.json(), "model")
    assert error["code"] == "model_not_found" and "gpt-4o" in error["message"]
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="gpt-4o", prompt="x", max_tokens=1)
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-4o")


def test_unknown_path_is_404_in_openai_shape(smol_server):
    r = httpx.get(smol_server.url + "/v1/nowhere")
    assert r.status_code == 404
    _assert_openai_error(r.json())


def test_unknown_fields_are_ignored_and_logged_once(client, smol_server):
    for _ in range(2):
        reply = client.chat.completions.create(model=SMOL_NAME, messages=MSG, max_tokens=1,
                                               extra_body={"frobnicate": True})
        assert reply.choices[0].message.content is not None
    lines = [ln for ln in smol_server.output if "frobnicate" in ln]
    assert len(lines) == 1 and "ignoring" in lines[0]


def test_server_keeps_serving_after_errors(client):
    for _ in range(3):
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(model=SMOL_NAME, messages=MSG, temperature=-5)
    assert client.chat.completions.create(model=SMOL_NAME, messages=MSG, max_tokens=1).choices


@pytest.mark.parametrize("raw", [b'"temperature": Infinity', b'"top_p": NaN', b'"top_k": 18446744073709551616',
                                 b'"min_tokens": 99999999999999999999'])
def test_non_finite_and_huge_numbers_are_400(smol_server, raw):
    body = b'{"model": "%s", "messages": [{"role": "user", "content": "hi"}], ' % SMOL_NAME.encode() + raw + b"}"
    r = httpx.post(smol_server.url + "/v1/chat/completions", content=body,
                   headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    _assert_openai_error(r.json())
