"""Prompt logprobs (vLLM's ``prompt_logprobs``): every prompt token's logprob given the tokens before it, equal to
HF transformers' on a tiny random checkpoint, through chunked prefill, prefix caching and each output kind."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from revolta_engine import LLM, SamplingParams
from revolta_engine.sampling_params import RequestOutputKind

PROMPT = list(range(5, 45))


@pytest.fixture(scope="module")
def reference(tiny_llama) -> torch.Tensor:
    """HF transformers' log-softmax at every prompt position (float32)."""
    hf = AutoModelForCausalLM.from_pretrained(tiny_llama, dtype=torch.float32).eval()
    with torch.no_grad():
        return torch.log_softmax(hf(torch.tensor([PROMPT])).logits[0].float(), dim=-1)


@pytest.fixture(scope="module")
def llm(tiny_llama) -> LLM:
    # a 16-token budget: the 40-token prompt's logprobs come from three prefill chunks
    return LLM(str(tiny_llama), dtype="float32", max_num_batched_tokens=16, block_size=8)


def params(k: int, **kw) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=2, prompt_logprobs=k, **kw)


def test_prompt_logprobs_equal_transformers(llm, reference):
    out = llm.generate({"prompt_token_ids": PROMPT}, params(3))[0]
    pl = out.prompt_logprobs
    assert pl is not None and len(pl) == len(PROMPT) and pl[0] is None
    for i in range(1, len(PROMPT)):
        row = reference[i - 1]
        own = pl[i][PROMPT[i]]
        assert own.logprob == pytest.approx(row[PROMPT[i]].item(), abs=1e-4)
        assert own.rank == int((row > row[PROMPT[i]]).sum()) + 1
        top = torch.topk(row, 3)
        assert set(top.indices.tolist()) <= set(pl[i])
        for r, (t, v) in enumerate(zip(top.indices.tolist(), top.values.tolist(), strict=True), start=1):
            assert pl[i][t].logprob == pytest.approx(v, abs=1e-4) and pl[i][t].rank == r
        assert len(pl[i]) == (3 if own.rank <= 3 else 4)  # the prompt token, then the top 3
        assert own.decoded_token is not None


def test_zero_alternatives_give_only_the_prompt_token(llm):
    pl = llm.generate({"prompt_token_ids": PROMPT}, params(0))[0].prompt_logprobs
    assert all(len(entry) == 1 and PROMPT[i] in entry for i, entry in enumerate(pl) if i)


def test_requests_with_prompt_logprobs_take_no_prefix_hits(llm):
    plain = SamplingParams(temperature=0.0, max_tokens=2)
    llm.generate({"prompt_token_ids": PROMPT}, plain)
    hit = llm.generate({"prompt_token_ids": PROMPT}, plain)[0]
    assert hit.num_cached_tokens > 0 and hit.prompt_logprobs is None
    first = llm.generate({"prompt_token_ids": PROMPT}, params(1))[0]
    again = llm.generate({"prompt_token_ids": PROMPT}, params(1))[0]
    assert first.num_cached_tokens == again.num_cached_tokens == 0
    assert [e and e[PROMPT[i]].logprob for i, e in enumerate(first.prompt_logprobs)] == \
        [e and e[PROMPT[i]].logprob for i, e in enumerate(again.prompt_logprobs)]


def test_n_sequences_and_a_one_token_prompt(llm):
    out = llm.generate({"prompt_token_ids": PROMPT}, params(1, n=2))[0]
    assert len(out.outputs) == 2 and len(out.prompt_logprobs) == len(PROMPT)
    assert all(e is not None for e in out.prompt_logprobs[1:])
    single = llm.generate({"prompt_token_ids": [7]}, params(2))[0]
    assert single.prompt_logprobs == [None]


def test_streamed_outputs_carry_them_once(llm):
    engine = llm.llm_engine
    engine.add_request("delta", {"prompt_token_ids": PROMPT},
                       params(1, output_kind=RequestOutputKind.DELTA, ignore_eos=True))
    seen = []
    while engine.has_unfinished_requests():
        seen += [o.prompt_logprobs for o in engine.step()]
    with_logprobs = [p for p in seen if p is not None]
    assert len(with_logprobs) == 1 and len(with_logprobs[0]) == len(PROMPT)
