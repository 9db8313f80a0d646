"""N-gram speculative decoding: the draft proposer, the verification rule, and the engine's output with drafts
equal to its output without them (greedy), on a tiny random Llama and on SmolLM2 copying a passage."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest
from spec_helpers import assert_same_marginals, oracle_drafts, repetitive_prompts

from revolta_engine import LLM, SamplingParams
from revolta_engine.engine.llm_engine import LLMEngine
from revolta_engine.errors import InvalidRequestError
from revolta_engine.spec_decode import NgramProposer, accepted_tokens, parse_speculative_config, propose_ngram

NGRAM = {"method": "ngram", "num_speculative_tokens": 4}


def test_proposer_prefers_the_longest_suffix_and_its_latest_occurrence():
    #          0  1  2  3  4  5  6  7  8  9 10 11
    tokens = [1, 2, 3, 9, 2, 3, 7, 8, 5, 1, 2, 3]
    # suffix [1, 2, 3] occurred at 0 (followed by 9, 2, 3, 7); [2, 3] alone would pick the later 4 (7, 8)
    assert propose_ngram(tokens, 4, 3, 1) == [9, 2, 3, 7]
    assert propose_ngram(tokens, 4, 2, 1) == [7, 8, 5, 1]
    assert propose_ngram(tokens, 2, 2, 1) == [7, 8]
    assert propose_ngram([4, 5, 6], 3, 3, 1) == []  # nothing repeats
    assert propose_ngram([4, 4, 4, 4], 3, 2, 1) == [4]  # the match right before the end: one token follows it
    assert propose_ngram([1, 2, 1], 3, 2, 2) == []  # below prompt_lookup_min


def test_verification_keeps_matching_drafts_then_one_sampled_token():
    assert accepted_tokens([5, 6, 7], [5, 6, 7, 8]) == [5, 6, 7, 8]  # all kept, plus the bonus token
    assert accepted_tokens([5, 6, 7], [5, 9, 7, 8]) == [5, 9]  # the first mismatch's sample ends the run
    assert accepted_tokens([5], [4, 1]) == [4]


@pytest.mark.parametrize(("raw", "message"), [
    ({"method": "eagle", "num_speculative_tokens": 2}, "not supported"),
    ({"method": "ngram"}, "num_speculative_tokens"),
    ({"method": "ngram", "num_speculative_tokens": 0}, "num_speculative_tokens"),
    ({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 3, "prompt_lookup_max": 2}, "prompt_lookup"),
    ({"method": "ngram", "num_speculative_tokens": 2, "model": "x"}, "draft_model"),
    ({"method": "draft_model", "num_speculative_tokens": 2}, "needs .model."),
    ({"num_speculative_tokens": 2, "draft_model": "x"}, "unknown key"),
])
def test_bad_configs_are_refused(raw, message):
    with pytest.raises(InvalidRequestError, match=message):
        parse_speculative_config(raw)


@pytest.mark.parametrize("extra", [
    {},
    {"max_num_batched_tokens": 16},  # chunked prefill around the drafts
    {"num_gpu_blocks_override": 12, "max_num_seqs": 8},  # preemption clears drafts and recomputes
])
def test_greedy_output_is_unchanged(tiny_llama, extra):
    prompts = repetitive_prompts(8)
    params = SamplingParams(temperature=0.0, max_tokens=30, ignore_eos=True)
    plain = LLM(str(tiny_llama), dtype="float32", **extra).generate(prompts, params)
    spec = LLM(str(tiny_llama), dtype="float32", speculative_config=NGRAM, **extra)
    out = spec.generate(prompts, params)
    assert [o.outputs[0].token_ids for o in out] == [o.outputs[0].token_ids for o in plain]
    assert spec.llm_engine.get_stats().spec_decode_num_draft_tokens > 0


def test_stops_inside_an_accepted_run_are_exact(tiny_llama):
    prompts = repetitive_prompts(4)
    base = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    plain = LLM(str(tiny_llama), dtype="float32")
    spec = LLM(str(tiny_llama), dtype="float32", speculative_config=NGRAM)
    ref = [o.outputs[0].token_ids for o in plain.generate(prompts, base)]
    for i, p in enumerate(prompts):
        stop_at = ref[i][len(ref[i]) // 2]
        params = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True, stop_token_ids=[stop_at])
        want = plain.generate(p, params)[0].outputs[0]
        got = spec.generate(p, params)[0].outputs[0]
        assert got.token_ids == want.token_ids and got.finish_reason == want.finish_reason == "stop"
        for max_tokens in (1, 2, 7):
            short = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
            assert spec.generate(p, short)[0].outputs[0].token_ids == ref[i][:max_tokens]


@pytest.mark.parametrize("extra", [{"repetition_penalty": 1.2}, {"presence_penalty": 0.5}, {"min_tokens": 12},
                                   {"frequency_penalty": 0.5, "logprobs": 2}])
def test_requests_that_need_per_position_sampling_get_no_drafts(tiny_llama, extra):
    spec = LLM(str(tiny_llama), dtype="float32", speculative_config=NGRAM)
    prompts = repetitive_prompts(3)
    spec.generate(prompts, SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True, **extra))
    assert spec.llm_engine.get_stats().spec_decode_num_draft_tokens == 0


def test_logprobs_with_drafts_are_those_of_a_plain_run(tiny_llama, monkeypatch):
    """Requests asking for logprobs get drafts, and each kept token reports its own row's logprobs: the sampled
    token's logprob, its rank and the top 3, as without speculation (drafts kept for every run length)."""
    prompts = repetitive_prompts(6)
    params = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True, logprobs=3)
    plain = LLM(str(tiny_llama), dtype="float32").generate(prompts, params)
    expected = {tuple(p["prompt_token_ids"]): o.outputs[0].token_ids for p, o in zip(prompts, plain, strict=True)}
    spec = LLM(str(tiny_llama), dtype="float32", speculative_config=NGRAM)
    monkeypatch.setattr("revolta_engine.engine.llm_engine.next_drafts",
                        oracle_drafts(expected, spec.llm_engine.hf_config.vocab_size))
    out = spec.generate(prompts, params)
    stats = spec.llm_engine.get_stats()
    assert 0 < stats.spec_decode_num_accepted_tokens < stats.spec_decode_num_draft_tokens
    for got, want in zip(out, plain, strict=True):
        g, w = got.outputs[0], want.outputs[0]
        assert g.token_ids == w.token_ids and len(g.logprobs) == len(w.logprobs) == params.max_tokens
        for tok, gp, wp in zip(g.token_ids, g.logprobs, w.logprobs, strict=True):
            assert gp.keys() == wp.keys() and gp[tok].rank == wp[tok].rank == 1
            for t in gp:
                assert gp[t].logprob == pytest.approx(wp[t].logprob, abs=1e-4)
        assert g.cumulative_logprob == pytest.approx(w.cumulative_logprob, abs=1e-3)


def test_may_draft_tells_exactly_whether_any_next_token_gives_drafts():
    rng = random.Random(5)
    for lookup_min, lookup_max in ((1, 3), (2, 4), (3, 3)):
        proposer = NgramProposer(lookup_max, lookup_min)
        for case in range(60):
            req = SimpleNamespace(request_id=f"r{case % 7}", all_token_ids=[])
            proposer.forget(req.request_id)
            for _ in range(rng.randrange(2, 14)):  # grows one token at a time, as a request does
                req.all_token_ids.append(rng.randrange(4))
                known = req.all_token_ids
                possible = any(propose_ngram(known + [x], 4, lookup_max, lookup_min) for x in range(4))
                if len(known) + 1 > lookup_min:  # shorter sequences never draft; may_draft may say yes
                    assert proposer.may_draft(req) == possible, (known, lookup_min)


def test_async_scheduling_with_ngram_drafts_keeps_output(tiny_llama, monkeypatch):
    prompts = repetitive_prompts(8) + [{"prompt_token_ids": list(range(30, 60))}]
    params = SamplingParams(temperature=0.0, max_tokens=30, ignore_eos=True)
    want = [o.outputs[0].token_ids for o in LLM(str(tiny_llama), dtype="float32").generate(prompts, params)]
    spec = LLM(str(tiny_llama), dtype="float32", speculative_config=NGRAM, async_scheduling=True)
    waits: list[bool] = []
    original = LLMEngine._needs_tokens_first

    def spy(engine, step):
        waits.append(original(engine, step))
        return waits[-1]

    monkeypatch.setattr(LLMEngine, "_needs_tokens_first", spy)
    assert [o.outputs[0].token_ids for o in spec.generate(prompts, params)] == want
    assert spec.llm_engine.get_stats().spec_decode_num_draft_tokens > 0
    assert True in waits and False in waits  # both loops ran: drafts possible, and none possible


def test_async_scheduling_with_ngram_drafts_alone_never_waits(tiny_llama, monkeypatch):
    prompt = {"prompt_token_ids": list(range(30, 60))}
    spec = LLM(str(tiny_llama), dtype="float32", speculative_config={**NGRAM, "prompt_lookup_min": 3},
               async_scheduling=True)
    engine = spec.llm_engine
    engine.add_request("a", prompt, SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True))
    kept_in_flight = 0
    while engine.has_unfinished_requests():
        engine.step()
        tokens = engine.scheduler.running[0].all_token_ids if engine.scheduler.running else []
        if engine._inflight is not None and not NgramProposer(4, 3).may_draft(
                SimpleNamespace(request_id="x", all_token_ids=tokens)):
            kept_in_flight += 1
    assert kept_in_flight > 0


@pytest.mark.parametrize(("family", "extra"), [
    ("qwen3_5", {}),
    ("qwen3_5", {"max_num_batched_tokens": 16}),  # chunked prefill: state snapshots at block ends, drafts after
    ("qwen3_next", {"num_gpu_blocks_override": 12, "max_num_seqs": 8}),  # preemption, with MoE layers
])
def test_hybrid_models_roll_their_state_back_past_rejected_drafts(tmp_path, monkeypatch, family, extra):
    """A rejected draft's recurrent state is replaced by the one after the last kept draft: with drafts kept for
    every run length from none to all, greedy output is the same as without drafts."""
    from hybrid_checkpoints import make_family_checkpoint

    path = str(make_family_checkpoint(tmp_path, family))
    prompts = repetitive_prompts(8)
    params = SamplingParams(temperature=0.0, max_tokens=30, ignore_eos=True)
    plain = LLM(path, dtype="float32", **extra).generate(prompts, params)
    expected = {tuple(p["prompt_token_ids"]): o.outputs[0].token_ids for p, o in zip(prompts, plain, strict=True)}
    spec = LLM(path, dtype="float32", speculative_config=NGRAM, **extra)
    monkeypatch.setattr("revolta_engine.engine.llm_engine.next_drafts",
                        oracle_drafts(expected, spec.llm_engine.hf_config.vocab_size))
    out = spec.generate(prompts, params)
    assert [o.outputs[0].token_ids for o in out] == [o.outputs[0].token_ids for o in plain]
    stats = spec.llm_engine.get_stats()
    assert 0.3 * stats.spec_decode_num_draft_tokens < stats.spec_decode_num_accepted_tokens \
        < 0.8 * stats.spec_decode_num_draft_tokens
    per_pos = stats.spec_decode_num_accepted_tokens_per_pos  # a draft is kept only after every draft before it
    assert len(per_pos) == 4 and sum(per_pos) == stats.spec_decode_num_accepted_tokens
    assert per_pos == sorted(per_pos, reverse=True) and per_pos[-1] > 0


PASSAGE = ("The quick brown fox jumps over the lazy dog. Paged attention stores keys and values in fixed-size "
           "blocks, and prefix caching reuses blocks whose tokens hash to the same value. ")
COPY = [{"role": "user", "content": "Copy this text exactly, word for word:\n\n" + PASSAGE * 2}]


@pytest.fixture(scope="module")
def smol_pair():
    return LLM(max_model_len=512), LLM(max_model_len=512, speculative_config=NGRAM)


def test_smollm2_copies_with_most_drafts_accepted(smol_pair):
    plain, spec = smol_pair
    params = SamplingParams(temperature=0.0, max_tokens=48)
    want = plain.chat(COPY, params)[0].outputs[0].token_ids
    got = spec.chat(COPY, params)[0].outputs[0].token_ids
    assert got == want
    stats = spec.llm_engine.get_stats()
    assert stats.spec_decode_num_accepted_tokens >= 0.5 * stats.spec_decode_num_draft_tokens > 0
    assert stats.spec_decode_num_drafts < len(got)  # fewer verification steps than tokens


def test_random_sampling_keeps_its_distribution(smol_pair):
    """The 2nd, 3rd and 4th sampled tokens of 400 sequences, with and without drafts, have the same marginal
    distributions (two-sample chi-square over the tokens seen at least 10 times, the rest pooled)."""
    plain, spec = smol_pair
    params = SamplingParams(temperature=1.3, max_tokens=4, n=400, seed=1234)
    a_out = [c.token_ids for c in plain.chat(COPY, params)[0].outputs]
    b_out = [c.token_ids for c in spec.chat(COPY, params)[0].outputs]
    assert spec.llm_engine.get_stats().spec_decode_num_accepted_tokens > 0
    assert_same_marginals(a_out, b_out, (1, 2, 3))
