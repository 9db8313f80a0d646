"""vLLM's max_logprobs: requests asking for more logprobs per token than the engine allows are 400s naming the
field; the engine's own limit (not a fixed 20) decides, and -1 lifts it."""

from __future__ import annotations

import openai
import pytest
from sdk_server import openai_client, serve

from revolta_engine import LLM, SamplingParams
from revolta_engine.errors import InvalidRequestError

MSG = [{"role": "user", "content": "Hi"}]


def test_a_raised_limit_serves_more_and_refuses_past_it():
    with serve(max_logprobs=30) as (url, _):
        client = openai_client(url)
        reply = client.chat.completions.create(model="smol", messages=MSG, max_tokens=2, logprobs=True,
                                               top_logprobs=25)
        assert all(len(p.top_logprobs) == 25 for p in reply.choices[0].logprobs.content)
        for kwargs, param in ((dict(logprobs=True, top_logprobs=31), "top_logprobs"),
                              (dict(extra_body={"prompt_logprobs": 31}), "prompt_logprobs")):
            with pytest.raises(openai.BadRequestError, match="at most 30") as info:
                client.chat.completions.create(model="smol", messages=MSG, max_tokens=2, **kwargs)
            assert info.value.body["param"] == param
        with pytest.raises(openai.BadRequestError, match="at most 30") as info:
            client.completions.create(model="smol", prompt="Hi", max_tokens=2, logprobs=31)
        assert info.value.body["param"] == "logprobs"
        assert client.completions.create(model="smol", prompt="Hi", max_tokens=1, logprobs=30).choices


def test_the_offline_engine_keeps_its_limit():
    llm = LLM(max_logprobs=3, max_model_len=256, kv_cache_memory_bytes=32 << 20)
    with pytest.raises(InvalidRequestError, match="at most 3") as info:
        llm.generate("Hi", SamplingParams(max_tokens=1, logprobs=4))
    assert info.value.param == "logprobs"
    with pytest.raises(InvalidRequestError, match="at most 3"):
        llm.generate("Hi", SamplingParams(max_tokens=1, prompt_logprobs=5))
    assert len(llm.generate("Hi", SamplingParams(max_tokens=1, logprobs=3))[0].outputs[0].logprobs[0]) >= 3
    unlimited = LLM(max_logprobs=-1, max_model_len=256, kv_cache_memory_bytes=32 << 20)
    out = unlimited.generate("Hi", SamplingParams(max_tokens=1, logprobs=60))[0].outputs[0]
    assert len(out.logprobs[0]) >= 60
