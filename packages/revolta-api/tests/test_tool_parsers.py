"""Tool-call parsers on recorded Hermes / Qwen3 / Qwen3-Coder / Llama 3 outputs, streamed and whole,
including malformed and cut-off calls (never a crash; what is not a call comes back as text)."""

from __future__ import annotations

import json

import pytest
from parser_tokenizer import deltas, encode, make_tokenizer

from revolta_api.chat_output import ChatOutputParser, fold_tool_calls, merged_text
from revolta_api.tool_parsers import get_tool_parser
from revolta_api.tool_parsers.arguments import arguments_object
from revolta_api.tool_parsers.json_stream import JsonValueStreamer

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                                     "scale": {"type": "number"}, "metric": {"type": "boolean"},
                                     "tags": {"type": "array"}, "opts": {"type": "object"}}}}}]
STEPS = [1, 3, 1000]


@pytest.fixture(scope="module")
def tok():
    return make_tokenizer()


def run(tok, name, text, step):
    parser = ChatOutputParser(tools=get_tool_parser(name)(tok, TOOLS))
    events = []
    for delta, chunk in deltas(tok, encode(tok, text), step):
        events += parser.feed(delta, chunk)
    events += parser.finish()
    for e in events:  # id and name come once, on a call's first piece
        if e.kind == "tool_call" and e.tool.name is not None:
            assert e.tool.id and e.tool.id.startswith("call_")
    starts = [e.tool.index for e in events if e.kind == "tool_call" and e.tool.name is not None]
    assert starts == sorted(set(starts))
    return merged_text(events, "content"), fold_tool_calls(events)


HERMES = ('Let me check.\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n'
          '</tool_call>\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Lyon", "days": 1}}\n'
          '</tool_call>')


@pytest.mark.parametrize("step", STEPS)
def test_hermes_two_calls(tok, step):
    content, calls = run(tok, "hermes", HERMES, step)
    assert content == "Let me check."
    assert [(c["name"], json.loads(c["arguments"])) for c in calls] == [
        ("get_weather", {"city": "Paris", "days": 3}), ("get_weather", {"city": "Lyon", "days": 1})]


@pytest.mark.parametrize("step", STEPS)
def test_hermes_big_integers_exact_and_non_finite_as_strings(tok, step):
    text = ('<tool_call>\n{"name": "get_weather", "arguments": {"days": 123456789012345678901234567890, '
            '"scale": NaN, "x": -Infinity, "y": [1.5e3, "Infinity"]}}\n</tool_call>')
    content, calls = run(tok, "hermes", text, step)
    assert content == ""
    args = calls[0]["arguments"]
    assert "123456789012345678901234567890" in args
    value = json.loads(args)
    assert value == {"days": 123456789012345678901234567890, "scale": "NaN", "x": "-Infinity",
                     "y": [1500.0, "Infinity"]}


@pytest.mark.parametrize("step", STEPS)
@pytest.mark.parametrize("text", [
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": </tool_call> after',
    "<tool_call>\nnot json at all\n</tool_call> after",
    '<tool_call>{"arguments": {"city": "Paris"}}</tool_call> after',
    "Just text with a < sign and <tool",
])
def test_hermes_malformed_never_crashes(tok, step, text):
    content, calls = run(tok, "hermes", text, step)
    if calls:  # a call whose name was read stays a call with what was generated
        assert calls[0]["name"] == "get_weather"
        assert isinstance(arguments_object(calls[0]["arguments"]), dict)
    else:
        assert content.replace(" ", "") == text.replace(" ", "") or content.endswith("after")
    assert "after" in content or "<tool" in content


def test_hermes_arguments_before_name_read_whole(tok):
    text = '<tool_call>{"arguments": {"city": "Paris"}, "name": "get_weather"}</tool_call>'
    content, calls = run(tok, "hermes", text, 2)
    assert content == "" and calls[0]["name"] == "get_weather" and json.loads(calls[0]["arguments"]) == {
        "city": "Paris"}


@pytest.mark.parametrize("step", STEPS)
def test_hermes_call_cut_by_max_tokens_keeps_what_was_generated(tok, step):
    content, calls = run(tok, "hermes", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par', step)
    assert content == "" and calls[0]["name"] == "get_weather"
    assert calls[0]["arguments"] == '{"city": "Par'
    assert arguments_object(calls[0]["arguments"]) == {"city": "Par"}


def test_hermes_streams_arguments_as_generated(tok):
    parser = get_tool_parser("hermes")(tok, TOOLS)
    events = parser.feed('<tool_call>{"name": "get_weather", "arguments": {"ci')
    assert [e.tool.name for e in events] == ["get_weather", None]
    assert events[1].tool.arguments == '{"ci'
    assert parser.feed('ty": "Paris"}}</tool_call>')[0].tool.arguments == 'ty": "Paris"}'


QWEN3_CODER = ("I will look it up.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\n</parameter>\n"
               "<parameter=days>\n98765432109876543210\n</parameter>\n<parameter=scale>\ninf\n</parameter>\n"
               "<parameter=metric>\nfalse\n</parameter>\n<parameter=tags>\n[\"a\", 2]\n</parameter>\n"
               "<parameter=opts>\nnot json\n</parameter>\n</function>\n</tool_call>")


@pytest.mark.parametrize("step", STEPS)
def test_qwen3_coder_types_values_by_schema(tok, step):
    content, calls = run(tok, "qwen3_coder", QWEN3_CODER, step)
    assert content == "I will look it up."
    assert calls[0]["name"] == "get_weather"
    assert json.loads(calls[0]["arguments"]) == {"city": "New York", "days": 98765432109876543210,
                                                 "scale": "inf", "metric": False, "tags": ["a", 2],
                                                 "opts": "not json"}


@pytest.mark.parametrize("step", STEPS)
def test_qwen3_coder_cut_mid_parameter(tok, step):
    text = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n4"
    content, calls = run(tok, "qwen3_coder", text, step)
    assert content == "" and json.loads(calls[0]["arguments"]) == {"city": "Paris"}


@pytest.mark.parametrize("step", STEPS)
def test_qwen3_coder_malformed_is_text(tok, step):
    text = "<tool_call>\n<func get_weather>\n</tool_call>"
    content, calls = run(tok, "qwen3_coder", text, step)
    assert calls == [] and content == text


@pytest.mark.parametrize("step", STEPS)
@pytest.mark.parametrize("text", [
    '{"name": "get_weather", "parameters": {"city": "Paris"}}',
    '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}',
])
def test_llama3_json_call(tok, step, text):
    content, calls = run(tok, "llama3_json", text, step)
    assert content == "" and calls[0]["name"] == "get_weather"
    assert json.loads(calls[0]["arguments"]) == {"city": "Paris"}


@pytest.mark.parametrize("step", STEPS)
@pytest.mark.parametrize("text", ["The weather is {nice}.", '{"city": "Paris"}', "{broken json"])
def test_llama3_json_non_calls_are_text(tok, step, text):
    content, calls = run(tok, "llama3_json", text, step)
    assert calls == [] and content == text


def test_json_streamer_finds_the_end_and_leaves_the_rest():
    streamer = JsonValueStreamer()
    out, rest = streamer.feed('{"a": "}", "b": [1, {"c": NaN}]}} tail')
    assert streamer.done and rest == "} tail"
    assert json.loads(out) == {"a": "}", "b": [1, {"c": "NaN"}]}


def test_unknown_tool_parser_name():
    with pytest.raises(ValueError, match="hermes"):
        get_tool_parser("nope")


@pytest.mark.parametrize("single", [False, True])
def test_openai_choice_output_message_and_parallel_switch(tok, single):
    from revolta_api.openai.chat_tools import ChoiceOutput
    from revolta_engine.outputs import CompletionOutput

    choice = ChoiceOutput(ChatOutputParser(tools=get_tool_parser("hermes")(tok, TOOLS)), single_call=single)
    ids = encode(tok, HERMES)
    pieces = list(deltas(tok, ids, 4))
    streamed = []
    for k, (text, chunk) in enumerate(pieces):
        last = k == len(pieces) - 1
        streamed.append(choice.feed(CompletionOutput(index=0, text=text, token_ids=chunk,
                                                     finish_reason="stop" if last else None)))
    message = choice.message()
    assert choice.finish_reason == "tool_calls" and message["content"] == "Let me check."
    cities = [json.loads(c["function"]["arguments"])["city"] for c in message["tool_calls"]]
    assert cities == (["Paris"] if single else ["Paris", "Lyon"])
    names = [tc["function"].get("name") for d in streamed for tc in d.get("tool_calls", [])]
    assert [n for n in names if n] == ["get_weather"] * len(cities)


@pytest.mark.parametrize("step", STEPS)
@pytest.mark.parametrize("single", [False, True])
def test_responses_output_keeps_one_call_without_parallel_calls(tok, step, single):
    """Responses with parallel_tool_calls=false: the second call is dropped also when the parser only flushes it
    at the end (held back by a stop string that could still match, then the output ends); with parallel calls both
    become function_call items."""
    import asyncio
    import types

    from revolta_api.metrics import ServerMetrics
    from revolta_api.parsed_call import ParsedCall
    from revolta_api.responses.items import ItemAssembler
    from revolta_engine.outputs import CompletionOutput, RequestOutput
    from revolta_engine.sampling_params import SamplingParams

    items = ItemAssembler()
    state = types.SimpleNamespace(metrics=ServerMetrics("m", lambda: None))
    parser = ChatOutputParser(tools=get_tool_parser("hermes")(tok, TOOLS), stop=["Lyon!"])
    call = ParsedCall(state, parser, items, single_call=single, params=SamplingParams())  # type: ignore[arg-type]
    cut = HERMES[:HERMES.index("Lyon") + 4]  # "Lyon" is held back (it could become "Lyon!") until the end
    pieces = list(deltas(tok, encode(tok, cut), step))

    async def outputs():
        for k, (text, chunk) in enumerate(pieces):
            done = k == len(pieces) - 1
            yield RequestOutput("r", None, [], [CompletionOutput(index=0, text=text, token_ids=chunk,
                                                                  finish_reason="stop" if done else None)], done)

    async def drain():
        return [e async for e in call._events(outputs())]

    asyncio.run(drain())
    calls = [i for i in items.items if i["type"] == "function_call"]
    assert len(calls) == (1 if single else 2) and json.loads(calls[0]["arguments"])["city"] == "Paris"
    assert all(c["name"] == "get_weather" for c in calls)
