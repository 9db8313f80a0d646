"""Server-wide request defaults (vLLM's --enable-force-include-usage, --return-tokens-as-token-ids and
--trust-request-chat-template)."""

from __future__ import annotations

import httpx
from sdk_server import openai_client, serve

from revolta_api.state import ServingOptions

MSG = [{"role": "user", "content": "Hi"}]


def test_forced_usage_chunks_and_logprob_tokens_as_ids():
    options = ServingOptions(force_include_usage=True, return_tokens_as_token_ids=True)
    with serve(options=options) as (url, _):
        client = openai_client(url)
        chunks = list(client.chat.completions.create(model="smol", messages=MSG, max_tokens=3, stream=True))
        assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 3
        text_chunks = list(client.completions.create(model="smol", prompt="Hi", max_tokens=3, stream=True))
        assert text_chunks[-1].usage.completion_tokens == 3
        reply = client.chat.completions.create(model="smol", messages=MSG, max_tokens=3, logprobs=True,
                                               extra_body={"return_token_ids": True})
        ids = reply.choices[0].model_extra["token_ids"]
        assert [p.token for p in reply.choices[0].logprobs.content] == [f"token_id:{t}" for t in ids]
        own = client.chat.completions.create(model="smol", messages=MSG, max_tokens=3, logprobs=True,
                                             extra_body={"return_tokens_as_token_ids": False})
        assert not any(p.token.startswith("token_id:") for p in own.choices[0].logprobs.content)


def test_request_chat_template_needs_the_operators_trust():
    template = "{% for m in messages %}<<{{ m.content }}>>{% endfor %}"
    body = {"model": "smol", "messages": MSG, "max_tokens": 1, "chat_template": template}
    with serve() as (url, _):
        refused = httpx.post(url + "/v1/chat/completions", json=body, timeout=300)
        assert refused.status_code == 400
        assert "--trust-request-chat-template" in refused.json()["error"]["message"]
        assert refused.json()["error"]["param"] == "chat_template"
        tokenized = httpx.post(url + "/tokenize", json={"messages": MSG, "chat_template": template}, timeout=300)
        assert tokenized.status_code == 400
        assert httpx.post(url + "/v1/chat/completions", json={**body, "chat_template": None}).status_code == 200
    with serve(options=ServingOptions(trust_request_chat_template=True)) as (url, _):
        reply = httpx.post(url + "/v1/chat/completions", json=body, timeout=300)
        assert reply.status_code == 200
        prompt = httpx.post(url + "/tokenize", json={"messages": MSG, "chat_template": template}).json()["tokens"]
        plain = httpx.post(url + "/tokenize", json={"prompt": "<<Hi>>", "add_special_tokens": False}).json()["tokens"]
        assert prompt == plain and reply.json()["usage"]["prompt_tokens"] == len(plain)
