"""Structured output and forced tool calls with the real ``openai`` and ``anthropic`` SDKs against a real server
running SmolLM2 with no arguments (no tool-call parser: forced calls use the Hermes format and parser).

Constrained decoding makes the 135M model's answers valid whatever it would have written: the outputs are
checked with ``jsonschema`` and the tool calls' arguments against the tools' schemas.
"""

from __future__ import annotations

import json
import re

import anthropic
import jsonschema
import openai
import pytest
from sdk_server import serve

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "pattern": "^[A-Za-z][A-Za-z ]{0,15}$"},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "city": {"enum": ["Paris", "Rome", "Oslo"]},
    },
    "required": ["name", "age", "city"],
    "additionalProperties": False,
}
WEATHER = {"type": "object", "properties": {"city": {"type": "string", "pattern": "^[A-Za-z ]{1,20}$"},
                                             "unit": {"enum": ["celsius", "fahrenheit"]}},
           "required": ["city", "unit"], "additionalProperties": False}
TIME = {"type": "object", "properties": {"zone": {"enum": ["UTC", "CET", "PST"]}}, "required": ["zone"],
        "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                           "parameters": WEATHER}},
         {"type": "function", "function": {"name": "get_time", "description": "Time in a zone", "parameters": TIME}}]
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
GREEDY = {"temperature": 0}


@pytest.fixture(scope="module")
def url():
    with serve(max_model_len=1024) as (base, _):
        yield base


def chat(oai, **kwargs):
    return oai.chat.completions.create(**{"model": "smol", "messages": ASK, "max_tokens": 80, "temperature": 0,
                                          **kwargs})


def test_response_format_json_schema(oai):
    reply = chat(oai, messages=[{"role": "user", "content": "Invent a person: name, age and city, as JSON."}],
                 response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON,
                                                                          "strict": True}})
    choice = reply.choices[0]
    assert choice.finish_reason == "stop"
    jsonschema.validate(json.loads(choice.message.content), PERSON)


def test_response_format_json_schema_streamed_with_two_samples(oai):
    stream = chat(oai, n=2, temperature=0.8, seed=3, stream=True,
                  messages=[{"role": "user", "content": "Invent a person as JSON."}],
                  response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}})
    texts = ["", ""]
    for chunk in stream:
        for c in chunk.choices:
            texts[c.index] += c.delta.content or ""
    for text in texts:
        jsonschema.validate(json.loads(text), PERSON)


def test_json_object_and_vllm_fields(oai):
    reply = chat(oai, response_format={"type": "json_object"},
                 messages=[{"role": "user", "content": "What is the capital of France? Answer as a JSON object "
                                                       'with the key "capital".'}])
    assert isinstance(json.loads(reply.choices[0].message.content), dict)
    regex = chat(oai, extra_body={"structured_outputs": {"regex": r"[0-9]{2}:[0-9]{2}"}})
    assert re.fullmatch(r"[0-9]{2}:[0-9]{2}", regex.choices[0].message.content)
    old = oai.completions.create(model="smol", prompt="Is the sky blue? Answer:", max_tokens=10, temperature=0,
                                 extra_body={"guided_choice": ["yes", "no"]})
    assert old.choices[0].text in ("yes", "no")
    grammar = oai.completions.create(model="smol", prompt="A greeting:", max_tokens=10, temperature=0,
                                     extra_body={"structured_outputs": {"grammar": 'root ::= ("hi" | "hello") "!"'}})
    assert grammar.choices[0].text in ("hi!", "hello!")


def test_schema_that_cannot_compile_is_400_for_that_request_only(oai):
    bad = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nonsense"}}}
    with pytest.raises(openai.BadRequestError) as err:
        chat(oai, response_format=bad)
    assert err.value.status_code == 400 and "nonsense" in err.value.message
    with pytest.raises(openai.BadRequestError) as err:
        chat(oai, extra_body={"structured_outputs": {"regex": "(("}})
    assert "regex" in err.value.message
    with pytest.raises(openai.BadRequestError) as err:
        chat(oai, response_format={"type": "xml"})
    assert err.value.body["param"] == "response_format.type"
    with pytest.raises(openai.BadRequestError):
        chat(oai, response_format={"type": "json_object"}, extra_body={"guided_regex": "a+"})
    assert chat(oai, max_tokens=3).choices[0].finish_reason == "length"  # the server goes on


def check_calls(calls, names=SCHEMAS):
    assert calls
    for call in calls:
        assert call.function.name in names
        jsonschema.validate(json.loads(call.function.arguments), names[call.function.name])


def test_tool_choice_required(oai):
    # One call: the 135M model, greedy, would repeat parallel calls until max_tokens.
    reply = chat(oai, tools=TOOLS, tool_choice="required", parallel_tool_calls=False)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    check_calls(choice.message.tool_calls)
    assert all(c.id.startswith("call_") for c in choice.message.tool_calls)


def test_named_tool_choice_and_streaming(oai):
    named = {"type": "function", "function": {"name": "get_time"}}
    reply = chat(oai, tools=TOOLS, tool_choice=named)
    calls = reply.choices[0].message.tool_calls
    assert len(calls) == 1 and calls[0].function.name == "get_time"
    check_calls(calls)
    stream = chat(oai, tools=TOOLS, tool_choice=named, stream=True)
    name, args = None, ""
    for chunk in stream:
        for delta in chunk.choices[0].delta.tool_calls or []:
            name = delta.function.name or name
            args += delta.function.arguments or ""
    assert name == "get_time" and json.loads(args) == json.loads(calls[0].function.arguments)


def test_tool_choice_errors(oai):
    with pytest.raises(openai.BadRequestError) as err:
        chat(oai, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "nope"}})
    assert "nope" in err.value.message
    with pytest.raises(openai.BadRequestError):
        chat(oai, tools=TOOLS, tool_choice="required", response_format={"type": "json_object"})


def test_anthropic_tool_choice_any_and_tool(claude):
    tools = [{"name": "get_weather", "description": "Weather in a city", "input_schema": WEATHER},
             {"name": "get_time", "description": "Time in a zone", "input_schema": TIME}]
    # One call each: the 135M model, greedy, would repeat parallel calls until max_tokens.
    for choice in ({"type": "any", "disable_parallel_tool_use": True}, {"type": "tool", "name": "get_time"}):
        reply = claude.messages.create(model="smol", max_tokens=80, messages=ASK, tools=tools, tool_choice=choice,
                                       extra_body=GREEDY)
        uses = [b for b in reply.content if b.type == "tool_use"]
        assert reply.stop_reason == "tool_use" and uses, reply
        for use in uses:
            jsonschema.validate(use.input, SCHEMAS[use.name])
        if choice["type"] == "tool":
            assert [u.name for u in uses] == ["get_time"]
    with claude.messages.stream(model="smol", max_tokens=80, messages=ASK, tools=tools,
                                tool_choice={"type": "tool", "name": "get_weather"}, extra_body=GREEDY) as stream:
        final = stream.get_final_message()
    use = next(b for b in final.content if b.type == "tool_use")
    assert use.name == "get_weather"
    jsonschema.validate(use.input, WEATHER)


def test_anthropic_output_format(claude):
    reply = claude.messages.create(
        model="smol", max_tokens=80, messages=[{"role": "user", "content": "Invent a person as JSON."}],
        extra_body={**GREEDY, "output_config": {"format": {"type": "json_schema", "schema": PERSON}}})
    jsonschema.validate(json.loads(reply.content[0].text), PERSON)
    with pytest.raises(anthropic.BadRequestError) as err:
        claude.messages.create(model="smol", max_tokens=10, messages=ASK, extra_body={
            "output_config": {"format": {"type": "json_schema", "schema": {"type": "nonsense"}}}})
    assert err.value.body["error"]["type"] == "invalid_request_error"
