"""The ``anthropic`` SDK against ``revolta serve`` with no arguments (engine core in its own process)."""

from __future__ import annotations

import anthropic
import pytest
from conftest import SMOL_NAME

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
GREEDY = {"temperature": 0}  # this SDK sends sampling fields only as extra body fields


@pytest.fixture(scope="module")
def claude(smol_server):
    return anthropic.Anthropic(base_url=smol_server.url, api_key="unused", max_retries=0, timeout=300)


def test_messages_create_and_stream(claude):
    reply = claude.messages.create(model=SMOL_NAME, max_tokens=16, messages=QUESTION, extra_body=GREEDY)
    text = "".join(b.text for b in reply.content if b.type == "text")
    assert "Paris" in text
    with claude.messages.stream(model=SMOL_NAME, max_tokens=16, messages=QUESTION, extra_body=GREEDY) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert streamed == text and final.stop_reason == reply.stop_reason
    assert final.usage.output_tokens == reply.usage.output_tokens
    counted = claude.messages.count_tokens(model=SMOL_NAME, messages=QUESTION)
    # the second request reads part of the prompt from the prefix cache: input_tokens leaves those out
    assert final.usage.cache_read_input_tokens > 0 and final.usage.cache_creation_input_tokens == 0
    for usage in (reply.usage, final.usage):
        assert counted.input_tokens == usage.input_tokens + usage.cache_read_input_tokens


def test_errors_in_anthropic_shape(claude):
    with pytest.raises(anthropic.NotFoundError) as info:
        claude.messages.create(model="claude-none", max_tokens=4, messages=QUESTION)
    assert info.value.body["error"]["type"] == "not_found_error"
    with pytest.raises(anthropic.BadRequestError) as info:
        claude.messages.create(model=SMOL_NAME, max_tokens=4, messages=QUESTION,
                               tools=[{"name": "f", "input_schema": {"type": "object"}}])
    assert "--tool-call-parser" in info.value.body["error"]["message"]
