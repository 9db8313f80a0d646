"""The benchmarks' oracle proposer (``benchmarks/common/oracle.py``) on a tiny random Llama: it drafts the target's
recorded greedy continuation, each position right with probability p, so the engine's acceptance is known; the
greedy output stays the plain run's."""

from __future__ import annotations

import random

import pytest
from common.oracle import OracleProposer, expected_acceptance_length, install_oracle, record_continuations

from revolta_engine import LLM, SamplingParams


def distinct_prompts(n: int, vocab: int) -> list[list[int]]:
    """``n`` prompts of distinct token ids, of different lengths (no n-gram repeats in any of them)."""
    rng = random.Random(7)
    return [rng.sample(range(5, vocab), 10 + 3 * i) for i in range(n)]


@pytest.fixture(scope="module")
def plain_and_records(tiny_llama):
    """The plain engine, the prompts and their recorded greedy continuations (25 tokens: 1 + 6 steps of 4)."""
    plain = LLM(str(tiny_llama), dtype="float32")
    prompts = distinct_prompts(4, int(plain.llm_engine.hf_config.vocab_size))
    return plain, prompts, record_continuations(plain, prompts, 25)


def oracle_engine(tiny_llama, records, k: int, p: float) -> tuple[LLM, OracleProposer]:
    llm = LLM(str(tiny_llama), dtype="float32", speculative_config={"method": "ngram", "num_speculative_tokens": k})
    oracle = OracleProposer(records, p, int(llm.llm_engine.hf_config.vocab_size), seed=11)
    install_oracle(llm, oracle)
    return llm, oracle


def greedy(llm: LLM, prompts: list[list[int]], max_tokens: int) -> list[list[int]]:
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    return [list(o.outputs[0].token_ids) for o in llm.generate([{"prompt_token_ids": p} for p in prompts], params)]


@pytest.mark.parametrize("k", [1, 3])
def test_every_draft_right_yields_one_plus_k_tokens_per_step(tiny_llama, plain_and_records, k):
    _, prompts, records = plain_and_records
    llm, oracle = oracle_engine(tiny_llama, records, k, 1.0)
    max_tokens = 1 + 6 * (k + 1)  # the prefill's token, then six full verification steps
    assert greedy(llm, prompts, max_tokens) == [records[tuple(p)][:max_tokens] for p in prompts]
    stats = llm.llm_engine.get_stats()
    assert stats.spec_decode_num_drafts == 6 * len(prompts) == oracle.proposals
    assert stats.spec_decode_num_accepted_tokens == stats.spec_decode_num_draft_tokens == 6 * k * len(prompts)
    assert 1 + stats.spec_decode_num_accepted_tokens / stats.spec_decode_num_drafts == k + 1
    assert oracle.counters()["expected_acceptance_length"] == k + 1 and oracle.off_record == 0


def test_no_draft_right_accepts_nothing(tiny_llama, plain_and_records):
    _, prompts, records = plain_and_records
    llm, oracle = oracle_engine(tiny_llama, records, 3, 0.0)
    assert greedy(llm, prompts, 25) == [records[tuple(p)] for p in prompts]
    stats = llm.llm_engine.get_stats()
    assert stats.spec_decode_num_draft_tokens > 0 and stats.spec_decode_num_accepted_tokens == 0
    # one token per step; every step after the prefill but the last (no room left under max_tokens) drafts
    assert stats.spec_decode_num_drafts == 23 * len(prompts)
    assert oracle.planned_accepted == 0 and oracle.counters()["expected_acceptance_length"] == 1


def test_partial_acceptance_is_what_the_oracle_planned(tiny_llama, plain_and_records):
    """At p = 0.7 verification keeps exactly the drafts before each step's first wrong one, and over the run the
    acceptance length is near its expectation 1 + p + p^2 + p^3."""
    _, prompts, records = plain_and_records
    llm, oracle = oracle_engine(tiny_llama, records, 3, 0.7)
    assert greedy(llm, prompts, 25) == [records[tuple(p)] for p in prompts]
    stats = llm.llm_engine.get_stats()
    assert stats.spec_decode_num_accepted_tokens == oracle.planned_accepted
    assert 0 < stats.spec_decode_num_accepted_tokens < stats.spec_decode_num_draft_tokens
    per_pos = stats.spec_decode_num_accepted_tokens_per_pos
    assert per_pos == sorted(per_pos, reverse=True) and per_pos[-1] > 0
    measured = 1 + stats.spec_decode_num_accepted_tokens / stats.spec_decode_num_drafts
    assert abs(measured - expected_acceptance_length(0.7, 3)) < 0.6


def test_the_oracle_needs_a_speculative_engine_without_a_model_proposer(tiny_llama):
    plain = LLM(str(tiny_llama), dtype="float32")
    with pytest.raises(ValueError, match="speculative config"):
        install_oracle(plain, OracleProposer({}, 1.0, 512))
    with pytest.raises(ValueError, match="p must be"):
        OracleProposer({}, 1.5, 512)


def test_expected_acceptance_length():
    assert expected_acceptance_length(1.0, 3) == 4
    assert expected_acceptance_length(0.0, 5) == 1
    assert expected_acceptance_length(0.5, 2) == pytest.approx(1.75)
