"""vLLM's request extras on chat and completions: token ids beside the text (``return_token_ids``), logprob
tokens named by id (``return_tokens_as_token_ids``), chat ``echo`` and ``documents``."""

from __future__ import annotations

import httpx
import openai
import pytest
from conftest import SMOL_NAME

CAPITAL = [{"role": "user", "content": "What is the capital of France?"}]
GREEDY = dict(model=SMOL_NAME, max_tokens=6, temperature=0)


@pytest.fixture(scope="module")
def client(smol_server) -> openai.OpenAI:
    return openai.OpenAI(base_url=smol_server.url + "/v1", api_key="unused", max_retries=0, timeout=300)


def detokenize(server, ids: list[int]) -> str:
    return httpx.post(server.url + "/detokenize", json={"tokens": ids}).json()["prompt"]


def test_chat_token_ids_are_the_prompt_and_the_reply(client, smol_server):
    reply = client.chat.completions.create(messages=CAPITAL, **GREEDY, extra_body={"return_token_ids": True})
    prompt = httpx.post(smol_server.url + "/tokenize", json={"messages": CAPITAL}).json()["tokens"]
    assert reply.model_extra["prompt_token_ids"] == prompt
    ids = reply.choices[0].model_extra["token_ids"]
    assert len(ids) == reply.usage.completion_tokens
    assert detokenize(smol_server, ids) == reply.choices[0].message.content
    chunks = list(client.chat.completions.create(messages=CAPITAL, **GREEDY, stream=True,
                                                 extra_body={"return_token_ids": True}))
    assert chunks[0].model_extra["prompt_token_ids"] == prompt
    assert all("prompt_token_ids" not in c.model_extra for c in chunks[1:])
    assert [t for c in chunks for ch in c.choices for t in (ch.model_extra.get("token_ids") or [])] == ids
    plain = client.chat.completions.create(messages=CAPITAL, **GREEDY)
    assert "prompt_token_ids" not in plain.model_extra and "token_ids" not in plain.choices[0].model_extra


def test_completion_token_ids_per_choice_streaming_and_not(client, smol_server):
    kwargs = dict(prompt=["The capital of France is", "One, two,"], **GREEDY, extra_body={"return_token_ids": True})
    reply = client.completions.create(**kwargs)
    for choice, text in zip(reply.choices, ("The capital of France is", "One, two,"), strict=True):
        prompt = httpx.post(smol_server.url + "/tokenize", json={"prompt": text}).json()["tokens"]
        assert choice.model_extra["prompt_token_ids"] == prompt
        assert detokenize(smol_server, choice.model_extra["token_ids"]) == choice.text
    streamed: dict[int, list[int]] = {}
    prompt_ids: dict[int, list] = {}
    for chunk in client.completions.create(**kwargs, stream=True):
        for choice in chunk.choices:
            streamed.setdefault(choice.index, []).extend(choice.model_extra["token_ids"])
            if "prompt_token_ids" in choice.model_extra:
                assert choice.index not in prompt_ids
                prompt_ids[choice.index] = choice.model_extra["prompt_token_ids"]
    for choice in reply.choices:
        assert streamed[choice.index] == choice.model_extra["token_ids"]
        assert prompt_ids[choice.index] == choice.model_extra["prompt_token_ids"]


def test_logprob_tokens_named_by_id(client):
    extra = {"return_tokens_as_token_ids": True, "return_token_ids": True}
    chat = client.chat.completions.create(messages=CAPITAL, **GREEDY, logprobs=True, top_logprobs=2,
                                          extra_body=extra)
    ids = chat.choices[0].model_extra["token_ids"]
    assert [p.token for p in chat.choices[0].logprobs.content] == [f"token_id:{t}" for t in ids]
    assert all(alt.token.startswith("token_id:") for p in chat.choices[0].logprobs.content for alt in p.top_logprobs)
    text = client.completions.create(prompt="The capital of France is", **GREEDY, logprobs=2, extra_body=extra)
    assert text.choices[0].logprobs.tokens == [f"token_id:{t}" for t in text.choices[0].model_extra["token_ids"]]


def test_chat_echo_starts_the_reply_with_the_continued_message(client):
    messages = [*CAPITAL, {"role": "assistant", "content": "The capital of France is"}]
    kwargs = dict(messages=messages, **GREEDY)
    extra = {"continue_final_message": True, "add_generation_prompt": False}
    plain = client.chat.completions.create(**kwargs, extra_body=extra).choices[0].message.content
    echoed = client.chat.completions.create(**kwargs, extra_body={**extra, "echo": True}).choices[0].message.content
    assert echoed == "The capital of France is" + plain
    chunks = client.chat.completions.create(**kwargs, stream=True, extra_body={**extra, "echo": True})
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == echoed
    user_last = client.chat.completions.create(messages=CAPITAL, **GREEDY, extra_body={"echo": True})
    assert user_last.choices[0].message.content == client.chat.completions.create(
        messages=CAPITAL, **GREEDY).choices[0].message.content  # only an assistant message is echoed


def test_documents_reach_the_chat_template(client):
    template = "{% for d in documents %}[{{ d.title }}] {{ d.text }}\n{% endfor %}{{ messages[-1].content }}"
    docs = [{"title": "atlas", "text": "Paris is the capital of France."}]
    with_docs = client.chat.completions.create(messages=CAPITAL, model=SMOL_NAME, max_tokens=1,
                                               extra_body={"chat_template": template, "documents": docs})
    written = client.completions.create(model=SMOL_NAME, max_tokens=1,
                                        prompt="[atlas] Paris is the capital of France.\n" + CAPITAL[0]["content"])
    assert with_docs.usage.prompt_tokens == written.usage.prompt_tokens
