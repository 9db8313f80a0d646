"""Anthropic Messages API with the real ``anthropic`` SDK against a real server on 127.0.0.1 (SmolLM2)."""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sdk_server import raw_events, serve

from revolta_api.anthropic import messages as messages_module
from revolta_api.anthropic.errors import ERROR_TYPES, anthropic_error_body
from revolta_api.errors import ApiError

KEY = "sk-test-key"
# This SDK no longer has sampling arguments; clients send them as extra body fields.
GREEDY = {"temperature": 0}
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def server():
    with serve(api_key=KEY) as (url, client):
        yield url, client


@pytest.fixture(scope="module")
def sdk(server):
    return anthropic.Anthropic(base_url=server[0], api_key=KEY, max_retries=0, timeout=300)


def text_of(message) -> str:
    return "".join(b.text for b in message.content if b.type == "text")


def test_create_answers_and_counts_tokens(sdk):
    reply = sdk.messages.create(model="smol", max_tokens=16, extra_body=GREEDY, messages=QUESTION)
    assert reply.type == "message" and reply.role == "assistant" and reply.id.startswith("msg_")
    assert "Paris" in text_of(reply)
    assert reply.stop_reason in ("end_turn", "max_tokens")
    counted = sdk.messages.count_tokens(model="smol", messages=QUESTION)
    assert counted.input_tokens == prompt_total(reply.usage) > 5
    assert 0 < reply.usage.output_tokens <= 16


def prompt_total(usage) -> int:
    """The whole prompt's tokens: Anthropic's input_tokens leaves out those read from (or written to) the cache."""
    return usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens


def test_usage_reports_prefix_cache_reads(server, sdk):
    """A prompt sent again is partly read from the prefix cache (whole 16-token blocks): cache_read_input_tokens
    counts those tokens and input_tokens the rest, in the reply, in message_start and in message_delta."""
    system = "You are a careful assistant. " * 12 + "Answer with one short sentence."
    kwargs = dict(model="smol", max_tokens=4, system=system, messages=[{"role": "user", "content": "Name a colour."}])
    counted = sdk.messages.count_tokens(model="smol", system=system, messages=kwargs["messages"]).input_tokens
    sdk.messages.create(**kwargs, extra_body=GREEDY)
    again = sdk.messages.create(**kwargs, extra_body=GREEDY)
    cached = again.usage.cache_read_input_tokens
    assert cached > 0 and cached % 16 == 0 and again.usage.cache_creation_input_tokens == 0
    assert again.usage.input_tokens == counted - cached > 0
    events = dict(raw_events(server[0], {**kwargs, **GREEDY}, key=KEY))
    for usage in (events["message_start"]["message"]["usage"], events["message_delta"]["usage"]):
        assert usage["cache_read_input_tokens"] == cached and usage["input_tokens"] == counted - cached
    assert events["message_delta"]["usage"]["output_tokens"] == again.usage.output_tokens


def test_stream_event_sequence_matches_create(server, sdk):
    kwargs = dict(model="smol", max_tokens=12, messages=QUESTION)
    reply = sdk.messages.create(**kwargs, extra_body=GREEDY)
    events = raw_events(server[0], {**kwargs, **GREEDY}, key=KEY)
    names = [name for name, _ in events]
    assert all(name == data["type"] for name, data in events)
    assert names[:2] == ["message_start", "ping"] and names[-2:] == ["message_delta", "message_stop"]
    assert names[2] == "content_block_start" and names[-3] == "content_block_stop"
    assert set(names[3:-3]) == {"content_block_delta"}
    start = events[0][1]["message"]
    assert start["content"] == [] and start["stop_reason"] is None
    assert start["usage"]["input_tokens"] + start["usage"]["cache_read_input_tokens"] == prompt_total(reply.usage)
    assert events[2][1]["content_block"] == {"type": "text", "text": ""}
    text = "".join(d["delta"]["text"] for n, d in events if n == "content_block_delta")
    assert all(d["delta"]["type"] == "text_delta" for n, d in events if n == "content_block_delta")
    assert text == text_of(reply)
    delta = events[-2][1]
    assert delta["delta"]["stop_reason"] == reply.stop_reason
    assert delta["usage"]["output_tokens"] == reply.usage.output_tokens
    with sdk.messages.stream(**kwargs, extra_body=GREEDY) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert streamed == text_of(final) == text_of(reply)
    assert final.usage.output_tokens == reply.usage.output_tokens


def test_system_prompt_and_multi_turn(sdk):
    turns = [*QUESTION, {"role": "assistant", "content": "Paris."},
             {"role": "user", "content": [{"type": "text", "text": "And of Italy?"}]}]
    plain = sdk.messages.count_tokens(model="smol", messages=turns).input_tokens
    system = "You answer with one word."
    with_system = sdk.messages.count_tokens(model="smol", messages=turns, system=system).input_tokens
    as_blocks = sdk.messages.count_tokens(model="smol", messages=turns,
                                          system=[{"type": "text", "text": system}]).input_tokens
    assert with_system == as_blocks and with_system != plain
    assert plain > sdk.messages.count_tokens(model="smol", messages=QUESTION).input_tokens
    reply = sdk.messages.create(model="smol", max_tokens=8, extra_body=GREEDY, messages=turns, system=system)
    assert prompt_total(reply.usage) == with_system
    assert text_of(reply)


def test_prefilled_assistant_turn_is_continued(sdk):
    turns = [*QUESTION, {"role": "assistant", "content": "The capital of France is"}]
    reply = sdk.messages.create(model="smol", max_tokens=4, extra_body=GREEDY, messages=turns)
    assert "Paris" in text_of(reply)


def test_stop_sequences_streaming_and_not(sdk):
    kwargs = dict(model="smol", max_tokens=16, extra_body=GREEDY, messages=QUESTION)
    full = text_of(sdk.messages.create(**kwargs))
    assert "Paris" in full
    reply = sdk.messages.create(**kwargs, stop_sequences=["Paris", "zzz-never"])
    assert reply.stop_reason == "stop_sequence" and reply.stop_sequence == "Paris"
    assert text_of(reply) == full[:full.index("Paris")]
    with sdk.messages.stream(**kwargs, stop_sequences=["Paris"]) as stream:
        final = stream.get_final_message()
    assert (final.stop_reason, final.stop_sequence, text_of(final)) == ("stop_sequence", "Paris", text_of(reply))


def test_max_tokens_and_sampling_knobs(sdk):
    reply = sdk.messages.create(model="smol", max_tokens=3, extra_body={"temperature": 0.7, "top_p": 0.9, "top_k": 20},
                                messages=[{"role": "user", "content": "Write a long story about a dragon."}])
    assert reply.stop_reason == "max_tokens" and reply.usage.output_tokens == 3


@pytest.mark.parametrize("kwargs, needle", [
    (dict(max_tokens=0), "max_tokens"),
    (dict(max_tokens=5, extra_body={"temperature": 1.5}), "temperature"),
    (dict(max_tokens=5, messages=[]), "messages"),
    (dict(max_tokens=5, messages=[{"role": "user", "content": [{"type": "image", "source": {
        "type": "base64", "media_type": "image/png", "data": "AAAA"}}]}]), "image"),
    (dict(max_tokens=5, messages=[{"role": "user", "content": [{"type": "video", "x": 1}]}]), "messages"),
    (dict(max_tokens=5, messages=[{"role": "user", "content": [{"type": "document", "source": {
        "type": "base64", "media_type": "application/pdf", "data": "JVBERi0="}}]}]), "base64 document sources"),
    (dict(max_tokens=5, messages=[{"role": "user", "content": [{"type": "document", "source": {
        "type": "url", "url": "https://example.com/a.pdf"}}]}]), "url document sources"),
    (dict(max_tokens=5, messages=[{"role": "user", "content": [{"type": "document", "source": {
        "type": "text", "media_type": "text/plain"}}]}]), "needs its text"),
    (dict(max_tokens=5, tools=[{"name": "f", "input_schema": {"type": "object"}}],
          tool_choice={"type": "tool", "name": "g"}), "tool_choice"),
    (dict(max_tokens=5, tools=[{"name": "f", "input_schema": {"type": "object"}}]), "--tool-call-parser"),
    (dict(max_tokens=5, output_config={"format": {"type": "xml"}}), "output_config.format"),
    (dict(max_tokens=5, output_config={"format": {"type": "json_schema", "schema": {"type": "nonsense"}}}),
     "cannot be compiled"),
])
def test_invalid_requests_are_400_invalid_request_error(sdk, kwargs, needle):
    kwargs = {"model": "smol", "messages": QUESTION, **kwargs}
    with pytest.raises(anthropic.BadRequestError) as info:
        sdk.messages.create(**kwargs)
    assert info.value.status_code == 400
    assert info.value.body["type"] == "error"
    assert info.value.body["error"]["type"] == "invalid_request_error"
    assert needle in info.value.body["error"]["message"]


def test_prompt_too_long_is_400_with_both_lengths(sdk):
    long = [{"role": "user", "content": "word " * 2000}]
    with pytest.raises(anthropic.BadRequestError) as info:
        sdk.messages.create(model="smol", max_tokens=5, messages=long)
    message = info.value.body["error"]["message"]
    assert "512" in message and any(str(n) in message for n in range(2000, 2100))
    with pytest.raises(anthropic.BadRequestError):
        sdk.messages.count_tokens(model="smol", messages=long)


def test_unknown_model_is_404_not_found_error(sdk):
    with pytest.raises(anthropic.NotFoundError) as info:
        sdk.messages.create(model="claude-nope", max_tokens=5, messages=QUESTION)
    assert info.value.body["error"]["type"] == "not_found_error" and "claude-nope" in info.value.message
    with pytest.raises(anthropic.NotFoundError):
        sdk.messages.count_tokens(model="claude-nope", messages=QUESTION)


@pytest.mark.parametrize("extra", [{"response_format": {"type": "json_schema", "json_schema": {
    "name": "x", "schema": {"type": "object", "properties": {"a": {"type": "nonsense"}}}}}},
    {"response_format": {"type": "yaml"}}, {"structured_outputs": {"regex": "[0-9"}},
    {"structured_outputs": {"regex": "a", "choice": ["a"]}}])
def test_bad_structured_output_is_refused_not_ignored(server, extra):
    oai = openai.OpenAI(base_url=server[0] + "/v1", api_key=KEY, max_retries=0)
    with pytest.raises(openai.BadRequestError, match="cannot be compiled|type must be|exactly one"):
        oai.chat.completions.create(model="smol", messages=QUESTION, max_tokens=4, extra_body=extra)
    plain = oai.chat.completions.create(model="smol", messages=QUESTION, max_tokens=2,
                                        response_format={"type": "text"})
    assert plain.choices[0].message.content


def test_auth_by_x_api_key_or_bearer(server):
    url = server[0]
    bad = anthropic.Anthropic(base_url=url, api_key="wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as info:
        bad.messages.create(model="smol", max_tokens=5, messages=QUESTION)
    assert info.value.status_code == 401
    assert info.value.body == {"type": "error", "error": {"type": "authentication_error",
                                                          "message": info.value.body["error"]["message"]}}
    body = {"model": "smol", "messages": QUESTION}
    assert httpx.post(url + "/v1/messages/count_tokens", json=body).status_code == 401
    ok = httpx.post(url + "/v1/messages/count_tokens", json=body, headers={"Authorization": f"Bearer {KEY}"})
    assert ok.status_code == 200 and ok.json()["input_tokens"] > 0


def test_oversized_body_is_413(server, monkeypatch):
    monkeypatch.setattr(messages_module, "MAX_REQUEST_BYTES", 1000)
    body = {"model": "smol", "max_tokens": 5, "messages": [{"role": "user", "content": "x" * 2000}]}
    reply = httpx.post(server[0] + "/v1/messages", json=body, headers={"x-api-key": KEY})
    assert reply.status_code == 413
    assert reply.json()["error"]["type"] == "request_too_large"


def test_unknown_path_under_messages_is_anthropic_404(server):
    reply = httpx.post(server[0] + "/v1/messages/nope", json={}, headers={"x-api-key": KEY})
    assert reply.status_code == 404 and reply.json()["error"]["type"] == "not_found_error"


@pytest.mark.parametrize("status, kind", [(429, "rate_limit_error"), (403, "permission_error"),
                                          (500, "api_error"), (503, "overloaded_error")])
def test_error_vocabulary(status, kind):
    assert anthropic_error_body(ApiError(status, "m")) == {"type": "error", "error": {"type": kind, "message": "m"}}


_text = st.text(max_size=12)
_block = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": _text}),
    st.fixed_dictionaries({"type": st.just("tool_use"), "id": _text, "name": _text,
                           "input": st.dictionaries(_text, st.integers() | _text, max_size=2)}),
    st.fixed_dictionaries({"type": st.just("tool_result"), "tool_use_id": _text,
                           "content": _text | st.lists(st.fixed_dictionaries({"type": st.just("text"),
                                                                              "text": _text}), max_size=2)}),
    st.fixed_dictionaries({"type": st.just("thinking"), "thinking": _text}),
    st.dictionaries(st.sampled_from(["type", "text", "source", "id"]), _text | st.integers(), max_size=3),
)
_message = st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "system", "tool"]),
                                  "content": _text | st.lists(_block, max_size=3)})
_body = st.fixed_dictionaries({"model": st.sampled_from(["smol", "other"]),
                               "messages": st.lists(_message, max_size=3)},
                              optional={"system": _text | st.lists(_block, max_size=2),
                                        "max_tokens": st.integers(-2, 2),
                                        "stop_sequences": st.lists(_text, max_size=2),
                                        "temperature": st.floats(-1, 2, allow_nan=False),
                                        "top_k": st.integers(-2, 5),
                                        "tool_choice": st.dictionaries(st.sampled_from(["type", "name"]), _text,
                                                                       max_size=2),
                                        "thinking": st.fixed_dictionaries({"type": _text | st.just("enabled")})})


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(body=_body, path=st.sampled_from(["/v1/messages", "/v1/messages/count_tokens"]))
def test_fuzzed_bodies_never_get_a_5xx(server, body, path):
    reply = httpx.post(server[0] + path, json=body, headers={"x-api-key": KEY}, timeout=120)
    assert reply.status_code < 500, reply.text
    if reply.status_code >= 400:
        error = reply.json()
        assert error["type"] == "error" and error["error"]["type"] in ERROR_TYPES.values()
        assert error["error"]["message"]


def test_text_documents_are_read_as_text(sdk):
    """A plain-text document (source "text" or "content") reaches the model as its title and text, set apart from
    the question by a blank line: the same prompt as that text written out."""
    atlas = "The capital of France is Paris."
    written = [{"role": "user", "content": f"Atlas\n\n{atlas}\n\nWhat is the capital of France?"}]
    for source in ({"type": "text", "media_type": "text/plain", "data": atlas},
                   {"type": "content", "content": [{"type": "text", "text": atlas}]}):
        blocks = [{"role": "user", "content": [{"type": "document", "title": "Atlas", "source": source},
                                               {"type": "text", "text": "What is the capital of France?"}]}]
        counted = sdk.messages.count_tokens(model="smol", messages=blocks).input_tokens
        assert counted == sdk.messages.count_tokens(model="smol", messages=written).input_tokens
    reply = sdk.messages.create(model="smol", max_tokens=8, extra_body=GREEDY, messages=blocks)
    assert text_of(reply) == text_of(sdk.messages.create(model="smol", max_tokens=8, extra_body=GREEDY,
                                                         messages=written))


def test_engine_crash_mid_stream_is_error_event_then_503(server, sdk):
    """Last in the module: a crash in the engine loop kills this server's engine."""
    engine = server[1].engine
    real_step = engine.step
    calls = {"n": 0}

    def crashing_step():
        calls["n"] += 1
        if calls["n"] > 3:
            raise RuntimeError("injected engine fault")
        return real_step()

    engine.step = crashing_step
    with pytest.raises(anthropic.APIStatusError) as info:
        with sdk.messages.stream(model="smol", max_tokens=64, extra_body=GREEDY, messages=QUESTION) as stream:
            for _ in stream:
                pass
    assert "overloaded" in str(info.value) or info.value.body["error"]["type"] == "overloaded_error"
    with pytest.raises(anthropic.APIStatusError) as info:
        sdk.messages.create(model="smol", max_tokens=5, messages=QUESTION)
    assert info.value.status_code == 503
    assert info.value.body["error"]["type"] == "overloaded_error"

