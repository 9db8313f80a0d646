"""vLLM's ``bad_words`` and ``truncate_prompt_tokens`` in the offline engine."""

from __future__ import annotations

import pytest

from revolta_engine import LLM, SamplingParams
from revolta_engine.errors import InvalidRequestError
from revolta_engine.sample.bad_words import bad_words_token_ids, banned_next_tokens

GREEDY = dict(temperature=0.0, max_tokens=20, ignore_eos=True)


def _contains(seq: list[int], sub: list[int]) -> bool:
    return any(seq[i:i + len(sub)] == sub for i in range(len(seq) - len(sub) + 1))


def test_banned_next_tokens_complete_a_sequence_only():
    seqs = [[7], [3, 4, 5]]
    assert banned_next_tokens(seqs, []) == [7]
    assert banned_next_tokens(seqs, [1, 3, 4]) == [7, 5]
    assert banned_next_tokens(seqs, [3, 4, 1]) == [7]


@pytest.fixture(scope="module")
def llm(tiny_llama):
    return LLM(str(tiny_llama), dtype="float32")


def test_bad_words_never_appear_in_the_output(llm):
    tok = llm.get_tokenizer()
    prompt = {"prompt_token_ids": [5, 40, 77, 120, 33]}
    plain = llm.generate(prompt, SamplingParams(**GREEDY))[0].outputs[0].token_ids
    word = tok.decode(plain[2:4]).strip()  # a word greedy decoding produces
    seqs = bad_words_token_ids(tok, [word])
    assert any(_contains(plain, s) for s in seqs), (word, seqs, plain)  # the test has something to block
    for params in (SamplingParams(**GREEDY, bad_words=[word]),
                   SamplingParams(temperature=1.0, seed=3, max_tokens=20, ignore_eos=True, n=4, bad_words=[word])):
        for out in llm.generate(prompt, params)[0].outputs:
            assert not any(_contains(out.token_ids, s) for s in seqs), (word, out.token_ids)


def test_truncate_prompt_tokens_keeps_the_last_tokens(llm):
    ids = list(range(10, 60))
    cut = llm.generate({"prompt_token_ids": ids}, SamplingParams(**GREEDY, truncate_prompt_tokens=8))[0]
    direct = llm.generate({"prompt_token_ids": ids[-8:]}, SamplingParams(**GREEDY))[0]
    assert cut.prompt_token_ids == ids[-8:]
    assert cut.outputs[0].token_ids == direct.outputs[0].token_ids


def test_truncate_minus_one_fits_an_over_long_prompt(tiny_llama):
    small = LLM(str(tiny_llama), dtype="float32", max_model_len=32)
    out = small.generate({"prompt_token_ids": list(range(5, 105))},
                         SamplingParams(temperature=0.0, max_tokens=1, truncate_prompt_tokens=-1))[0]
    assert out.prompt_token_ids == list(range(74, 105)) and len(out.outputs[0].token_ids) == 1


@pytest.mark.parametrize(("kwargs", "param"), [
    ({"truncate_prompt_tokens": 0}, "truncate_prompt_tokens"),
    ({"bad_words": [""]}, "bad_words"),
    ({"bad_words": "word"}, "bad_words"),
])
def test_bad_values_are_refused(kwargs, param):
    with pytest.raises(InvalidRequestError) as err:
        SamplingParams(**kwargs)
    assert err.value.param == param
