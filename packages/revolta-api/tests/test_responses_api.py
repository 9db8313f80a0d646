"""OpenAI's Responses API (``POST /v1/responses``) with the real ``openai`` SDK against a real server (SmolLM2):
text, instructions and message items, streaming events, the max_output_tokens cut-off, forced function calls and
their results sent back, json_schema output, stored responses and previous_response_id, and 4xx for what is not
supported."""

from __future__ import annotations

import json
import time

import jsonschema
import openai
import pytest
from sdk_server import openai_client, serve

WEATHER = {"type": "object", "properties": {"city": {"type": "string", "pattern": "^[A-Za-z ]{1,20}$"}},
           "required": ["city"], "additionalProperties": False}
TOOLS = [{"type": "function", "name": "get_weather", "description": "Weather in a city", "parameters": WEATHER}]
CITY = {"type": "object", "properties": {"city": {"enum": ["Paris", "Rome", "Oslo"]}}, "required": ["city"],
        "additionalProperties": False}


@pytest.fixture(scope="module")
def oai():
    with serve(max_model_len=1024) as (base, _):
        yield openai_client(base, timeout=600)


def test_text_answer_with_usage(oai):
    resp = oai.responses.create(model="smol", input="What is the capital of France?", max_output_tokens=24,
                                temperature=0)
    assert resp.object == "response" and resp.status == "completed"
    assert "Paris" in resp.output_text
    assert resp.output[0].type == "message" and resp.output[0].role == "assistant"
    assert resp.usage.input_tokens > 5 and resp.usage.output_tokens >= 1
    assert resp.usage.total_tokens == resp.usage.input_tokens + resp.usage.output_tokens


def test_instructions_and_message_items(oai):
    resp = oai.responses.create(
        model="smol", instructions="Answer with one word.", temperature=0, max_output_tokens=8,
        input=[{"role": "user", "content": [{"type": "input_text", "text": "What is the capital of Italy?"}]}])
    assert "Rome" in resp.output_text


def test_stream_events_build_the_same_text(oai):
    kwargs = dict(model="smol", input="What is the capital of France?", max_output_tokens=24, temperature=0)
    events = list(oai.responses.create(stream=True, **kwargs))
    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"] and types[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    final = events[-1].response
    assert deltas == final.output_text == oai.responses.create(**kwargs).output_text
    assert "response.output_item.done" in types and "response.content_part.done" in types


def test_max_output_tokens_leaves_the_response_incomplete(oai):
    resp = oai.responses.create(model="smol", input="Tell me a long story.", max_output_tokens=3, temperature=0)
    assert resp.status == "incomplete" and resp.incomplete_details.reason == "max_output_tokens"
    assert resp.usage.output_tokens == 3


def test_forced_function_call_and_its_result(oai):
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    resp = oai.responses.create(model="smol", input=ask, tools=TOOLS, tool_choice="required", temperature=0,
                                max_output_tokens=60)
    calls = [item for item in resp.output if item.type == "function_call"]
    assert calls and calls[0].name == "get_weather" and calls[0].call_id
    jsonschema.validate(json.loads(calls[0].arguments), WEATHER)
    follow = oai.responses.create(
        model="smol", tools=TOOLS, tool_choice="none", temperature=0, max_output_tokens=30,
        input=[*ask, {"type": "function_call", "call_id": calls[0].call_id, "name": "get_weather",
                      "arguments": calls[0].arguments},
               {"type": "function_call_output", "call_id": calls[0].call_id, "output": "Sunny, 24 C"}])
    assert follow.status == "completed" and follow.output_text


def test_json_schema_text_format(oai):
    resp = oai.responses.create(model="smol", input="Name a European capital as JSON.", temperature=0,
                                max_output_tokens=40,
                                text={"format": {"type": "json_schema", "name": "city", "schema": CITY}})
    jsonschema.validate(json.loads(resp.output_text), CITY)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"tools": [{"type": "web_search"}]}, "only function tools"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, "input_image"),
    ({"text": {"format": {"type": "grammar"}}}, "text.format"),
    ({"input": []}, "must not be empty"),
])
def test_unsupported_requests_are_400s(oai, kwargs, message):
    with pytest.raises(openai.BadRequestError, match=message):
        oai.responses.create(**{"model": "smol", "input": "Hi", "max_output_tokens": 2, **kwargs})


def test_streamed_function_call_arguments(oai):
    events = list(oai.responses.create(model="smol", input="What is the weather in Oslo?", tools=TOOLS,
                                       tool_choice={"type": "function", "name": "get_weather"}, temperature=0,
                                       max_output_tokens=60, stream=True))
    args = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert done and done[0].arguments == args
    jsonschema.validate(json.loads(args), WEATHER)
    final = [item for item in events[-1].response.output if item.type == "function_call"]
    assert final[0].arguments == args and final[0].status == "completed"


def test_previous_response_id_continues_a_stored_conversation(oai):
    first = oai.responses.create(model="smol", input="My name is Alice. Please remember it.", temperature=0,
                                 max_output_tokens=20)
    assert first.store and oai.responses.retrieve(first.id).output_text == first.output_text
    follow = oai.responses.create(model="smol", input="What is my name?", previous_response_id=first.id,
                                  temperature=0, max_output_tokens=12)
    assert follow.previous_response_id == first.id
    assert follow.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens  # the history was sent
    assert "Alice" in follow.output_text
    streamed = list(oai.responses.create(model="smol", input="And again?", previous_response_id=follow.id,
                                         temperature=0, max_output_tokens=4, stream=True))
    kept = oai.responses.retrieve(streamed[-1].response.id)  # streamed ones are kept too
    assert kept.status == streamed[-1].response.status and kept.output_text == streamed[-1].response.output_text
    private = oai.responses.create(model="smol", input="Hi", store=False, max_output_tokens=2)
    with pytest.raises(openai.NotFoundError):
        oai.responses.retrieve(private.id)
    oai.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError, match="not found"):
        oai.responses.create(model="smol", input="Hi", previous_response_id=first.id, max_output_tokens=2)


def test_the_store_keeps_the_most_recently_used():
    from revolta_api.responses.store import ResponseStore

    store = ResponseStore(max_entries=2)
    for rid in ("a", "b"):
        store.put({"id": rid}, [])
    assert store.get("a") is not None  # now the most recent
    store.put({"id": "c"}, [])
    assert store.get("b") is None and store.get("a") is not None and store.get("c") is not None
    assert store.delete("a") and not store.delete("a")


@pytest.fixture(scope="module")
def background_server():
    with serve(max_model_len=1024) as (base, client):
        yield openai_client(base, timeout=600), client


def wait_for(oai, response_id: str, timeout: float = 120.0):
    """Poll a background response until it leaves queued / in_progress."""
    deadline = time.monotonic() + timeout
    while True:
        resp = oai.responses.retrieve(response_id)
        if resp.status not in ("queued", "in_progress") or time.monotonic() > deadline:
            return resp
        time.sleep(0.2)


def test_background_response_is_queued_then_read_back_finished(background_server):
    oai, _ = background_server
    kwargs = dict(model="smol", input="What is the capital of France?", max_output_tokens=16, temperature=0)
    queued = oai.responses.create(**kwargs, background=True)
    assert queued.status == "queued" and queued.background is True and queued.usage is None
    done = wait_for(oai, queued.id)
    assert done.status == "completed" and done.output_text == oai.responses.create(**kwargs).output_text
    assert done.usage.output_tokens >= 1
    follow = oai.responses.create(model="smol", input="And of Italy?", previous_response_id=done.id,
                                  max_output_tokens=8, temperature=0)
    assert follow.status in ("completed", "incomplete")


def test_cancelling_a_background_response_stops_it_and_frees_the_engine(background_server):
    oai, client = background_server
    long = dict(model="smol", input="Tell me a long story.", max_output_tokens=900, temperature=0,
                extra_body={"ignore_eos": True})
    queued = oai.responses.create(**long, background=True)
    deadline = time.monotonic() + 60
    partial = oai.responses.retrieve(queued.id)
    while not partial.output_text and time.monotonic() < deadline:
        time.sleep(0.1)  # a running response reads back with its output so far
        partial = oai.responses.retrieve(queued.id)
    assert partial.status == "in_progress" and partial.output[0].status == "in_progress" and partial.output_text
    cancelled = oai.responses.cancel(queued.id)
    assert cancelled.status == "cancelled" and cancelled.output_text.startswith(partial.output_text)
    assert oai.responses.retrieve(queued.id).status == "cancelled"
    assert oai.responses.cancel(queued.id).status == "cancelled"  # cancelling again changes nothing
    deadline = time.monotonic() + 30
    while (client.stats().num_running or client.stats().kv_cache_usage) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert client.stats().num_running == 0 and client.stats().kv_cache_usage == 0.0
    running = oai.responses.create(**long, background=True)
    oai.responses.delete(running.id)  # deleting a running one stops it too
    with pytest.raises(openai.NotFoundError):
        oai.responses.retrieve(running.id)


def test_background_requests_that_cannot_work_are_400s(background_server):
    oai, _ = background_server
    plain = oai.responses.create(model="smol", input="Hi", max_output_tokens=2)
    with pytest.raises(openai.BadRequestError, match="Only background responses"):
        oai.responses.cancel(plain.id)
    with pytest.raises(openai.BadRequestError, match="must be stored"):
        oai.responses.create(model="smol", input="Hi", max_output_tokens=2, background=True, store=False)
    with pytest.raises(openai.BadRequestError, match="not streamed"):
        oai.responses.create(model="smol", input="Hi", max_output_tokens=2, background=True, stream=True)
    with pytest.raises(openai.NotFoundError):
        oai.responses.cancel("resp_missing")
