"""``logit_bias`` (OpenAI's) and ``allowed_token_ids`` (vLLM's): they steer sampling, and token ids outside the
vocabulary are refused when the request is added instead of failing the engine's step."""

from __future__ import annotations

import pytest

from revolta_engine import LLM, SamplingParams
from revolta_engine.errors import InvalidRequestError

PROMPT = {"prompt_token_ids": list(range(5, 30))}


@pytest.fixture(scope="module")
def llm(tiny_llama) -> LLM:
    return LLM(str(tiny_llama), dtype="float32")


def first_tokens(llm: LLM, **kw) -> list[int]:
    return llm.generate(PROMPT, SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True, **kw))[0] \
        .outputs[0].token_ids


def test_a_large_bias_forces_or_bans_a_token(llm):
    plain = first_tokens(llm)
    target = (plain[0] + 7) % 500
    assert first_tokens(llm, logit_bias={target: 100.0}) == [target] * 4
    banned = first_tokens(llm, logit_bias={plain[0]: -100.0})
    assert banned[0] != plain[0]
    assert first_tokens(llm, logit_bias={target: 0.0}) == plain  # a zero bias changes nothing


def test_bias_applies_to_random_sampling_too(llm):
    outs = llm.generate(PROMPT, SamplingParams(temperature=1.0, max_tokens=3, n=8, seed=3, logit_bias={42: 100.0}))
    assert all(c.token_ids == [42, 42, 42] for c in outs[0].outputs)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"logit_bias": {5: 101.0}}, "from -100 to 100"),
    ({"logit_bias": {"5": 1.0}}, "keys must be token ids"),
    ({"allowed_token_ids": []}, "must not be empty"),
])
def test_bad_values_are_refused(kwargs, message):
    with pytest.raises(InvalidRequestError, match=message):
        SamplingParams(**kwargs)


@pytest.mark.parametrize("kwargs", [{"logit_bias": {10**6: 5.0}}, {"allowed_token_ids": [3, 10**6]}])
def test_ids_outside_the_vocabulary_are_refused_and_the_engine_keeps_serving(llm, kwargs):
    with pytest.raises(InvalidRequestError, match="outside the vocabulary"):
        llm.generate(PROMPT, SamplingParams(max_tokens=2, **kwargs))
    assert len(first_tokens(llm)) == 4
