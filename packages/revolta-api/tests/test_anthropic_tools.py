"""A full tool round trip (call, result, final answer) in both APIs, streaming and not, with the real SDKs
against a real server running SmolLM2 with ``--enable-auto-tool-choice --tool-call-parser hermes``.

SmolLM2's own template has no tools, so the server gets a Hermes-style ChatML template (``--chat-template``);
one worked example in the conversation is enough for the 135M model to write the call format greedily.
"""

from __future__ import annotations

import json

import pytest
from sdk_server import serve

from revolta_api.chat_parsing import ChatParsing

HERMES_CHATML = """
{%- if tools %}<|im_start|>system
{% if messages[0].role == 'system' %}{{ messages[0].content }}

{% endif %}You may call these tools:
<tools>
{% for t in tools %}{{ t.function | tojson }}
{% endfor %}</tools><|im_end|>
{% elif messages[0].role == 'system' %}<|im_start|>system
{{ messages[0].content }}<|im_end|>
{% endif %}
{%- for m in messages %}{% if m.role == 'system' %}{% elif m.role == 'tool' %}<|im_start|>tool
{{ m.content }}<|im_end|>
{% else %}<|im_start|>{{ m.role }}
{{ m.content }}{% for c in m.tool_calls or [] %}<tool_call>
{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}
</tool_call>{% endfor %}<|im_end|>
{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""
SYSTEM = "You call tools. To get the weather, answer only with a tool call."
GREEDY = {"temperature": 0}
WEATHER = {"name": "get_weather", "description": "Weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
EXAMPLE = [{"role": "user", "content": "What is the weather in Rome?"},
           {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                              "input": {"city": "Rome"}}]},
           {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                         "content": "Sunny, 25 C"}]},
           {"role": "assistant", "content": "It is sunny and 25 C in Rome."},
           {"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def url():
    parsing = ChatParsing(tool_call_parser="hermes", enable_auto_tool_choice=True)
    with serve(parsing=parsing, max_model_len=1024, chat_template=HERMES_CHATML) as (base, _):
        yield base


def ask(claude, messages, **kwargs):
    kwargs = {"model": "smol", "max_tokens": 40, "system": SYSTEM, "tools": [WEATHER], "messages": messages,
              "extra_body": GREEDY, **kwargs}
    return claude.messages.create(**kwargs)


def test_anthropic_tool_round_trip(claude):
    reply = ask(claude, EXAMPLE)
    assert reply.stop_reason == "tool_use"
    uses = [b for b in reply.content if b.type == "tool_use"]
    assert len(uses) == 1 and uses[0].name == "get_weather" and uses[0].input == {"city": "Paris"}
    assert uses[0].id.startswith("toolu_")
    follow = [*EXAMPLE, {"role": "assistant", "content": reply.content},
              {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id,
                                            "content": "Rainy, 12 C"}]}]
    final = ask(claude, follow)
    assert final.stop_reason == "end_turn" and not any(b.type == "tool_use" for b in final.content)
    text = "".join(b.text for b in final.content if b.type == "text")
    assert "Paris" in text and "12" in text


def test_anthropic_tool_use_streams_like_create(claude):
    reply = ask(claude, EXAMPLE)
    with claude.messages.stream(model="smol", max_tokens=40, system=SYSTEM, tools=[WEATHER], messages=EXAMPLE,
                                extra_body=GREEDY) as stream:
        events = list(stream)
        final = stream.get_final_message()
    starts = [e for e in events if e.type == "content_block_start"]
    assert [s.content_block.type for s in starts] == [b.type for b in reply.content]
    partial = "".join(e.delta.partial_json for e in events
                      if e.type == "content_block_delta" and e.delta.type == "input_json_delta")
    assert json.loads(partial) == {"city": "Paris"}
    assert final.stop_reason == "tool_use"
    assert [(b.type, getattr(b, "input", None)) for b in final.content] == \
        [(b.type, getattr(b, "input", None)) for b in reply.content]


def cut_point(claude) -> int:
    """A max_tokens that ends generation inside the call's arguments (the full call minus its last tokens)."""
    full = ask(claude, EXAMPLE).usage.output_tokens
    assert full > 12
    return full - 8


def test_anthropic_call_cut_by_max_tokens(claude):
    limit = cut_point(claude)
    cut = ask(claude, EXAMPLE, max_tokens=limit)
    assert cut.stop_reason == "max_tokens"
    uses = [b for b in cut.content if b.type == "tool_use"]
    assert len(uses) == 1 and uses[0].name == "get_weather"
    assert "Paris".startswith(uses[0].input.get("city", ""))  # what was generated before the cut
    with claude.messages.stream(model="smol", max_tokens=limit, system=SYSTEM, tools=[WEATHER], messages=EXAMPLE,
                                extra_body=GREEDY) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "max_tokens"
    assert [b.model_dump(exclude={"id"}) for b in final.content] == [b.model_dump(exclude={"id"})
                                                                     for b in cut.content]


def test_anthropic_tool_choice_any_forces_a_call(claude):
    reply = ask(claude, EXAMPLE, tool_choice={"type": "any", "disable_parallel_tool_use": True})
    uses = [b for b in reply.content if b.type == "tool_use"]
    assert reply.stop_reason == "tool_use" and [u.name for u in uses] == ["get_weather"], reply
    assert isinstance(uses[0].input.get("city"), str)


OPENAI_TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                                  "parameters": WEATHER["input_schema"]}}]
OPENAI_EXAMPLE = [
    {"role": "system", "content": SYSTEM},
    {"role": "user", "content": "What is the weather in Rome?"},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function", "function": {
        "name": "get_weather", "arguments": '{"city": "Rome"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 25 C"},
    {"role": "assistant", "content": "It is sunny and 25 C in Rome."},
    {"role": "user", "content": "What is the weather in Paris?"}]


def test_openai_tool_round_trip_streaming_and_not(oai):
    kwargs = dict(model="smol", messages=OPENAI_EXAMPLE, tools=OPENAI_TOOLS, max_tokens=40, temperature=0)
    reply = oai.chat.completions.create(**kwargs)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}
    chunks = list(oai.chat.completions.create(**kwargs, stream=True))
    deltas = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert [d.function.name for d in deltas if d.function.name] == ["get_weather"]
    assert len([d.id for d in deltas if d.id]) == 1
    assert "".join(d.function.arguments or "" for d in deltas) == call.function.arguments
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    follow = [*OPENAI_EXAMPLE, choice.message.model_dump(exclude_none=True),
              {"role": "tool", "tool_call_id": call.id, "content": "Rainy, 12 C"}]
    final = oai.chat.completions.create(**{**kwargs, "messages": follow})
    assert final.choices[0].finish_reason == "stop" and not final.choices[0].message.tool_calls
    assert "12" in final.choices[0].message.content


def test_openai_call_cut_by_max_tokens(oai, claude):
    kwargs = dict(model="smol", messages=OPENAI_EXAMPLE, tools=OPENAI_TOOLS, max_tokens=cut_point(claude),
                  temperature=0)
    reply = oai.chat.completions.create(**kwargs)
    assert reply.choices[0].finish_reason == "length"
    arguments = reply.choices[0].message.tool_calls[0].function.arguments
    assert arguments and '{"city": "Paris"}'.startswith(arguments)  # what was generated, as generated
    chunks = list(oai.chat.completions.create(**kwargs, stream=True))
    streamed = "".join(tc.function.arguments or "" for c in chunks if c.choices
                       for tc in (c.choices[0].delta.tool_calls or []))
    assert streamed == arguments and chunks[-1].choices[0].finish_reason == "length"


def test_openai_required_tool_choice_forces_a_call(oai):
    reply = oai.chat.completions.create(model="smol", messages=OPENAI_EXAMPLE, tools=OPENAI_TOOLS, max_tokens=40,
                                        tool_choice="required", parallel_tool_calls=False, temperature=0)
    calls = reply.choices[0].message.tool_calls
    assert reply.choices[0].finish_reason == "tool_calls" and calls and calls[0].function.name == "get_weather"
    assert isinstance(json.loads(calls[0].function.arguments).get("city"), str)
