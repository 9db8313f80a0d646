"""Reasoning end to end: ``--reasoning-parser deepseek_r1`` on a tiny random model whose vocabulary has
``</think>`` as one token; its greedy answer to QUESTION (fixed seed) contains that token mid-way.

Thinking off (``chat_template_kwargs.enable_thinking`` False / Anthropic ``thinking: disabled``) renders the
same prompt here, so its content is the raw output the split is checked against.
"""

from __future__ import annotations

import httpx
import pytest
from parser_tokenizer import make_thinking_model
from sdk_server import anthropic_client, openai_client, raw_events, serve

from revolta_api.chat_parsing import ChatParsing
from revolta_api.state import ServingOptions

QUESTION = [{"role": "user", "content": "What is the weather?"}]
GREEDY = {"temperature": 0}
ON = {"type": "enabled", "budget_tokens": 1024}


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    model = make_thinking_model(tmp_path_factory.mktemp("thinking") / "model")
    with serve(parsing=ChatParsing(reasoning_parser="deepseek_r1"), max_model_len=256, model=str(model)) as (base, _):
        yield base


@pytest.fixture(scope="module")
def raw(oai):
    """The raw output with thinking off, and the expected (reasoning, content) split of it."""
    reply = oai.chat.completions.create(model="smol", messages=QUESTION, max_tokens=24, temperature=0,
                                        extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    text = reply.choices[0].message.content
    assert getattr(reply.choices[0].message, "reasoning", None) is None
    assert "</think>" in text  # the seeded model writes the end token mid-answer
    reasoning, content = text.split("</think>", 1)
    return text, reasoning, content.lstrip("\n")


def test_openai_reasoning_fields_streaming_and_not(oai, raw):
    _, reasoning, content = raw
    kwargs = dict(model="smol", messages=QUESTION, max_tokens=24, temperature=0)
    message = oai.chat.completions.create(**kwargs).choices[0].message
    assert (message.reasoning, message.reasoning_content, message.content) == (reasoning, reasoning, content)
    chunks = list(oai.chat.completions.create(**kwargs, stream=True))
    streamed_reasoning = "".join(getattr(c.choices[0].delta, "reasoning", None) or "" for c in chunks if c.choices)
    streamed_content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert (streamed_reasoning, streamed_content) == (reasoning, content)


def test_anthropic_thinking_blocks(claude, raw):
    _, reasoning, content = raw
    reply = claude.messages.create(model="smol", max_tokens=24, messages=QUESTION, thinking=ON, extra_body=GREEDY)
    assert [b.type for b in reply.content] == ["thinking", "text"]
    assert (reply.content[0].thinking, reply.content[1].text) == (reasoning, content)
    with claude.messages.stream(model="smol", max_tokens=24, messages=QUESTION, thinking=ON,
                                extra_body=GREEDY) as stream:
        final = stream.get_final_message()
    assert [b.model_dump() for b in final.content] == [b.model_dump() for b in reply.content]


def test_anthropic_thinking_stream_events(url, raw):
    _, reasoning, content = raw
    events = raw_events(url, {"model": "smol", "max_tokens": 24, "messages": QUESTION, "thinking": ON, **GREEDY})
    deltas = [d["delta"] for name, d in events if name == "content_block_delta"]
    assert "".join(d["thinking"] for d in deltas if d["type"] == "thinking_delta") == reasoning
    assert "".join(d["text"] for d in deltas if d["type"] == "text_delta") == content
    kinds = [d["type"] for d in deltas]
    assert kinds.index("signature_delta") < kinds.index("text_delta")
    starts = [d["content_block"]["type"] for name, d in events if name == "content_block_start"]
    assert starts == ["thinking", "text"]


def test_anthropic_thinking_disabled_is_all_text(claude, raw):
    text = raw[0]
    reply = claude.messages.create(model="smol", max_tokens=24, messages=QUESTION,
                                   thinking={"type": "disabled"}, extra_body=GREEDY)
    assert [b.type for b in reply.content] == ["text"] and reply.content[0].text == text


def test_stop_sequences_apply_only_after_thinking(claude, raw):
    _, reasoning, content = raw
    stop = next(reasoning[i:i + 2] for i in range(len(reasoning) - 1)
                if reasoning[i:i + 2] not in content and "\ufffd" not in reasoning[i:i + 2])
    kwargs = dict(model="smol", max_tokens=24, messages=QUESTION, stop_sequences=[stop], extra_body=GREEDY)
    thinking = claude.messages.create(**kwargs, thinking=ON)
    assert thinking.stop_reason != "stop_sequence" and thinking.content[0].thinking == reasoning
    plain = claude.messages.create(**kwargs, thinking={"type": "disabled"})
    assert (plain.stop_reason, plain.stop_sequence) == ("stop_sequence", stop)
    assert plain.content[0].text == reasoning[:reasoning.index(stop)]


@pytest.fixture(scope="module")
def thinking_off_server(tmp_path_factory):
    """The same model served with --default-chat-template-kwargs '{"enable_thinking": false}'."""
    model = make_thinking_model(tmp_path_factory.mktemp("thinking_off") / "model")
    with serve(parsing=ChatParsing(reasoning_parser="deepseek_r1"), max_model_len=256, model=str(model),
               options=ServingOptions(default_chat_template_kwargs={"enable_thinking": False})) as (base, _):
        yield base


def test_server_default_turns_thinking_off_unless_the_request_turns_it_on(thinking_off_server, raw):
    text, reasoning, content = raw
    oai = openai_client(thinking_off_server)
    kwargs = dict(model="smol", messages=QUESTION, max_tokens=24, temperature=0)
    plain = oai.chat.completions.create(**kwargs).choices[0].message
    assert plain.content == text and getattr(plain, "reasoning", None) is None
    asked = oai.chat.completions.create(**kwargs, extra_body={"chat_template_kwargs": {"enable_thinking": True}})
    assert (asked.choices[0].message.reasoning, asked.choices[0].message.content) == (reasoning, content)
    claude = anthropic_client(thinking_off_server)
    reply = claude.messages.create(model="smol", max_tokens=24, messages=QUESTION, extra_body=GREEDY)
    assert [b.type for b in reply.content] == ["text"] and reply.content[0].text == text
    on = claude.messages.create(model="smol", max_tokens=24, messages=QUESTION, thinking=ON, extra_body=GREEDY)
    assert [b.type for b in on.content] == ["thinking", "text"]
    response = oai.responses.create(model="smol", input=QUESTION, max_output_tokens=24, temperature=0)
    assert [item.type for item in response.output] == ["message"] and response.output_text == text


def test_default_template_variables_render_unless_the_request_sets_its_own(tmp_path):
    """Any variable, not only enable_thinking: /tokenize shows what the template rendered."""
    template = "{{ greeting }}{% for m in messages %}{{ m['content'] }}{% endfor %}"
    model = make_thinking_model(tmp_path / "model")
    with serve(max_model_len=256, model=str(model), chat_template=template,
               options=ServingOptions(default_chat_template_kwargs={"greeting": "Hello "})) as (base, _):
        def rendered(**body: object) -> str:
            ids = httpx.post(base + "/tokenize", json={"messages": [{"role": "user", "content": "you"}],
                                                        **body}).json()["tokens"]
            return httpx.post(base + "/detokenize", json={"tokens": ids}).json()["prompt"]

        assert rendered() == "Hello you"
        assert rendered(chat_template_kwargs={"greeting": "Bye "}) == "Bye you"
