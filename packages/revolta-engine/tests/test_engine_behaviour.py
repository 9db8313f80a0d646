"""Engine behaviour that must not change greedy output: prefix hits, chunking, preemption, batching."""

from __future__ import annotations

import pytest
import torch

from revolta_engine import LLM, SamplingParams
from revolta_engine.errors import (
    InvalidRequestError,
    ModelLoadError,
    PromptTooLongError,
    UnsupportedModelError,
)

GREEDY = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)


def prompts(n: int, length: int = 40, seed: int = 0, vocab: int = 200) -> list[dict]:
    gen = torch.Generator().manual_seed(seed)
    return [{"prompt_token_ids": torch.randint(3, vocab, (length + i,), generator=gen).tolist()} for i in range(n)]


@pytest.fixture(scope="module")
def baseline(tiny_llama):
    llm = LLM(str(tiny_llama), dtype="float32", enable_prefix_caching=False, max_model_len=256)
    ps = prompts(16)
    return ps, [llm.generate(p, GREEDY)[0].outputs[0].token_ids for p in ps]


def tokens(outs) -> list[list[int]]:
    return [o.outputs[0].token_ids for o in outs]


def test_sixteen_requests_together_equal_one_at_a_time(tiny_llama, baseline):
    ps, alone = baseline
    llm = LLM(str(tiny_llama), dtype="float32", max_model_len=256)
    assert tokens(llm.generate(ps, GREEDY)) == alone


def test_prefix_cache_hit_leaves_output_unchanged(tiny_llama, baseline):
    ps, alone = baseline
    llm = LLM(str(tiny_llama), dtype="float32", max_model_len=256, block_size=8)
    first = llm.generate(ps[0], GREEDY)[0]
    assert first.num_cached_tokens == 0
    again = llm.generate(ps[0], GREEDY)[0]
    # 40 tokens fill 5 blocks of 8, but the block holding the last token is recomputed for its logits.
    assert again.num_cached_tokens == 32
    assert again.outputs[0].token_ids == first.outputs[0].token_ids == alone[0]
    stats = llm.llm_engine.get_stats()
    assert stats.prefix_cache_hits == 32 and stats.kv_cache_usage == 0.0


def test_chunked_prefill_with_a_16_token_budget(tiny_llama, baseline):
    ps, alone = baseline
    llm = LLM(str(tiny_llama), dtype="float32", max_model_len=256, max_num_batched_tokens=16)
    assert tokens(llm.generate(ps[:4], GREEDY)) == alone[:4]


def test_preemption_under_a_tiny_kv_pool(tiny_llama, baseline):
    ps, alone = baseline
    # 12 blocks of 16 tokens: 8 requests of ~52 tokens cannot all stay resident.
    llm = LLM(str(tiny_llama), dtype="float32", max_model_len=256, num_gpu_blocks_override=12)
    assert tokens(llm.generate(ps[:8], GREEDY)) == alone[:8]
    assert llm.llm_engine.get_stats().num_preemptions > 0
    assert llm.llm_engine.get_stats().kv_cache_usage == 0.0


def test_seeded_sampling_is_reproducible_and_batch_independent(tiny_llama):
    llm = LLM(str(tiny_llama), dtype="float32", max_model_len=256)
    p = prompts(3, seed=5)
    seeded = SamplingParams(temperature=1.0, top_p=0.9, max_tokens=10, seed=1234, ignore_eos=True)
    alone = llm.generate(p[0], seeded)[0].outputs[0].token_ids
    unseeded = SamplingParams(temperature=1.0, max_tokens=10, ignore_eos=True)
    mixed = llm.generate(p, [seeded, unseeded, unseeded])[0].outputs[0].token_ids
    assert alone == mixed
    other_seed = SamplingParams(temperature=1.0, top_p=0.9, max_tokens=10, seed=99, ignore_eos=True)
    assert llm.generate(p[0], other_seed)[0].outputs[0].token_ids != alone


def test_n_completions_and_logprobs(tiny_llama):
    llm = LLM(str(tiny_llama), dtype="float32", max_model_len=256)
    out = llm.generate(prompts(1)[0], SamplingParams(n=3, temperature=1.0, seed=0, max_tokens=5, logprobs=2,
                                                     ignore_eos=True))[0]
    assert [c.index for c in out.outputs] == [0, 1, 2]
    for c in out.outputs:
        assert len(c.token_ids) == 5 and len(c.logprobs) == 5 and c.finish_reason == "length"
        for tok, pos in zip(c.token_ids, c.logprobs, strict=True):
            assert tok in pos and all(lp.logprob <= 0 for lp in pos.values())
            assert len(pos) in (2, 3)  # sampled token plus top-2 (the sampled one may be among them)
        assert c.cumulative_logprob == pytest.approx(sum(p[t].logprob for t, p in zip(c.token_ids, c.logprobs, strict=False)))


def test_max_tokens_and_stop_token_ids(tiny_llama, baseline):
    ps, alone = baseline
    llm = LLM(str(tiny_llama), dtype="float32", max_model_len=256)
    stop_tok = alone[0][3]
    out = llm.generate(ps[0], SamplingParams(temperature=0, max_tokens=12, stop_token_ids=[stop_tok],
                                             ignore_eos=True))[0].outputs[0]
    first = alone[0].index(stop_tok)
    assert out.token_ids == alone[0][: first + 1]
    assert out.finish_reason == "stop" and out.stop_reason == stop_tok
    out = llm.generate(ps[0], SamplingParams(temperature=0, max_tokens=3, ignore_eos=True))[0].outputs[0]
    assert out.token_ids == alone[0][:3] and out.finish_reason == "length"


def test_min_tokens_blocks_eos(tiny_llama, baseline):
    ps, alone = baseline
    llm = LLM(str(tiny_llama), dtype="float32", max_model_len=256)
    eos = alone[0][0]  # pretend the first greedy token is EOS
    llm.llm_engine.eos_token_ids.add(eos)
    try:
        out = llm.generate(ps[0], SamplingParams(temperature=0, max_tokens=6, min_tokens=4))[0].outputs[0]
        assert eos not in out.token_ids[:4] and len(out.token_ids) >= 4
        out = llm.generate(ps[0], SamplingParams(temperature=0, max_tokens=6))[0].outputs[0]
        assert out.token_ids == [eos] and out.finish_reason == "stop"
        out = llm.generate(ps[0], SamplingParams(temperature=0, max_tokens=6, ignore_eos=True))[0].outputs[0]
        assert out.token_ids == alone[0][:6], "ignore_eos neither stops nor masks EOS"
    finally:
        llm.llm_engine.eos_token_ids.discard(eos)


def test_bad_requests_raise_typed_errors_and_others_keep_running(tiny_llama, tmp_path, baseline):
    ps, alone = baseline
    llm = LLM(str(tiny_llama), dtype="float32", max_model_len=64)
    engine = llm.llm_engine
    engine.add_request("good", ps[0], GREEDY)
    engine.step()
    with pytest.raises(PromptTooLongError, match="64") as err:
        engine.add_request("long", {"prompt_token_ids": [5] * 80}, GREEDY)
    assert "80" in str(err.value)
    with pytest.raises(InvalidRequestError, match="max_tokens"):
        engine.add_request("zero", ps[1], SamplingParams(max_tokens=0))
    with pytest.raises(InvalidRequestError, match="top_p"):
        engine.add_request("topp", ps[1], SamplingParams(top_p=1.5))
    with pytest.raises(InvalidRequestError, match="vocabulary"):
        engine.add_request("oov", {"prompt_token_ids": [10**7]}, GREEDY)
    with pytest.raises(InvalidRequestError, match="empty"):
        engine.add_request("empty", {"prompt_token_ids": []}, GREEDY)
    with pytest.raises(InvalidRequestError, match="unpaired UTF-16 surrogate"):
        engine.add_request("surrogate", "half an emoji: \ud83d", GREEDY)
    done = []
    while engine.has_unfinished_requests():
        done += [o for o in engine.step() if o.finished]
    assert [o.request_id for o in done] == ["good"]
    assert done[0].outputs[0].token_ids == alone[0]


def test_missing_path_and_unknown_architecture(tmp_path, tiny_llama):
    with pytest.raises(ModelLoadError, match="does-not-exist"):
        LLM(str(tmp_path / "does-not-exist"))
    import json
    import shutil

    odd = tmp_path / "odd"
    shutil.copytree(tiny_llama, odd)
    cfg = json.loads((odd / "config.json").read_text())
    cfg["architectures"] = ["NoSuchModelForCausalLM"]
    (odd / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(UnsupportedModelError, match="NoSuchModelForCausalLM"):
        LLM(str(odd))


def test_abort_frees_blocks(tiny_llama):
    llm = LLM(str(tiny_llama), dtype="float32", max_model_len=256)
    engine = llm.llm_engine
    engine.add_request("a", prompts(1)[0], SamplingParams(max_tokens=50, ignore_eos=True))
    engine.step()
    assert engine.get_stats().kv_cache_usage > 0
    engine.abort_request(["a"])
    assert engine.get_stats().kv_cache_usage == 0 and not engine.has_unfinished_requests()


def test_skip_tokenizer_init_runs_on_token_ids(tiny_llama, baseline):
    ps, alone = baseline
    llm = LLM(str(tiny_llama), dtype="float32", max_model_len=256, skip_tokenizer_init=True)
    assert llm.get_tokenizer() is None
    out = llm.generate(ps[0], GREEDY)[0].outputs[0]
    assert out.token_ids == alone[0] and out.text == ""
    with pytest.raises(InvalidRequestError, match="token ids"):
        llm.generate("a text prompt", GREEDY)


def test_delta_outputs_report_each_finished_completion_once(tiny_llama):
    from revolta_engine import RequestOutputKind

    llm = LLM(str(tiny_llama), dtype="float32", max_model_len=256)
    engine = llm.llm_engine
    # Completion 0 stops after 2 tokens, completion 1 runs for 8: completion 0's final delta must appear once.
    params = SamplingParams(n=2, temperature=1.0, seed=3, max_tokens=8, ignore_eos=True,
                            output_kind=RequestOutputKind.DELTA)
    engine.add_request("r", prompts(1)[0], params)
    engine.scheduler.requests["0_r"].max_tokens = 2
    finals: dict[int, int] = {}
    tokens: dict[int, list[int]] = {0: [], 1: []}
    while engine.has_unfinished_requests():
        for out in engine.step():
            for c in out.outputs:
                tokens[c.index] += c.token_ids
                if c.finish_reason is not None:
                    finals[c.index] = finals.get(c.index, 0) + 1
    assert finals == {0: 1, 1: 1}
    assert len(tokens[0]) == 2 and len(tokens[1]) == 8


def test_iteration_token_counts_add_up_to_the_tokens_the_model_ran(tiny_llama):
    """vLLM's iteration_tokens_total: a prefill chunked into 16-token steps, then one token per decode step."""
    llm = LLM(str(tiny_llama), dtype="float32", enable_prefix_caching=False, max_model_len=256,
              max_num_batched_tokens=16)
    before = llm.llm_engine.get_stats()
    llm.generate(prompts(1, length=40), GREEDY)
    after = llm.llm_engine.get_stats()
    steps = [a - b for a, b in zip(after.iteration_tokens_counts, before.iteration_tokens_counts, strict=True)]
    assert after.iteration_tokens_sum - before.iteration_tokens_sum == 40 + GREEDY.max_tokens - 1
    assert steps[0] == GREEDY.max_tokens - 1  # decode steps: one token each (bucket <= 1)
    assert steps[1:3] == [1, 2]  # 16 + 16 + 8 prompt tokens: two steps in (8, 16], the last one in (1, 8]
    assert sum(steps) == GREEDY.max_tokens - 1 + 3
