"""Draft-model speculative decoding (``speculative_config={"model": PATH, "num_speculative_tokens": k}``)."""

from __future__ import annotations

import pytest
import torch
from checkpoints import make_tiny_checkpoint
from spec_helpers import assert_same_marginals

from revolta_engine import LLM, SamplingParams
from revolta_engine.errors import InvalidRequestError, ModelLoadError

GREEDY = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)


def _prompts(n: int, vocab: int = 400) -> list[dict]:
    gen = torch.Generator().manual_seed(9)
    return [{"prompt_token_ids": torch.randint(3, vocab, (5 + 9 * i,), generator=gen).tolist()} for i in range(n)]


def _draft(path, k: int = 3) -> dict:
    return {"model": str(path), "num_speculative_tokens": k}


@pytest.mark.parametrize("extra", [
    {},
    {"max_num_batched_tokens": 16},  # the draft catches up on long prompts in several passes
    {"num_gpu_blocks_override": 10, "max_num_seqs": 6},  # preemption: the draft's cache starts over
])
def test_the_model_drafting_for_itself_is_accepted_and_changes_nothing(tiny_llama, extra):
    prompts = _prompts(6)
    plain = LLM(str(tiny_llama), dtype="float32", **extra).generate(prompts, GREEDY)
    spec = LLM(str(tiny_llama), dtype="float32", speculative_config=_draft(tiny_llama), **extra)
    out = spec.generate(prompts, GREEDY)
    assert [o.outputs[0].token_ids for o in out] == [o.outputs[0].token_ids for o in plain]
    stats = spec.llm_engine.get_stats()
    # the same model proposes the tokens greedy decoding takes: a bookkeeping slip in its cache would show here
    assert stats.spec_decode_num_accepted_tokens >= 0.95 * stats.spec_decode_num_draft_tokens > 0
    if "num_gpu_blocks_override" in extra:
        assert stats.num_preemptions > 0


def test_another_model_drafts_and_greedy_output_is_unchanged(tiny_checkpoints):
    target, draft = tiny_checkpoints["llama"], tiny_checkpoints["qwen3"]  # same tokenizer, other weights
    prompts = _prompts(4)
    plain = LLM(str(target), dtype="float32").generate(prompts, GREEDY)
    spec = LLM(str(target), dtype="float32", speculative_config=_draft(draft, 4))
    assert [o.outputs[0].token_ids for o in spec.generate(prompts, GREEDY)] == \
        [o.outputs[0].token_ids for o in plain]
    assert spec.llm_engine.get_stats().spec_decode_num_draft_tokens > 0


def test_random_sampling_keeps_its_distribution(tiny_llama):
    """The 2nd..4th sampled tokens of 400 sequences with and without a draft model have the same marginal
    distributions (two-sample chi-square, tokens seen at least 10 times, the rest pooled)."""
    prompt = _prompts(1)[0]
    params = SamplingParams(temperature=1.0, max_tokens=4, n=400, seed=77, ignore_eos=True)
    plain = LLM(str(tiny_llama), dtype="float32", max_num_seqs=400)
    spec = LLM(str(tiny_llama), dtype="float32", max_num_seqs=400, speculative_config=_draft(tiny_llama))
    a_out = [c.token_ids for c in plain.generate(prompt, params)[0].outputs]
    b_out = [c.token_ids for c in spec.generate(prompt, params)[0].outputs]
    stats = spec.llm_engine.get_stats()
    assert 0 < stats.spec_decode_num_accepted_tokens < stats.spec_decode_num_draft_tokens
    assert_same_marginals(a_out, b_out, (1, 2, 3))


def test_draft_model_with_tensor_parallel_target(tiny_llama):
    prompts = _prompts(3)
    plain = LLM(str(tiny_llama), dtype="float32").generate(prompts, GREEDY)
    with LLM(str(tiny_llama), dtype="float32", tensor_parallel_size=2,
             speculative_config=_draft(tiny_llama)) as spec:
        out = spec.generate(prompts, GREEDY)
        assert spec.llm_engine.get_stats().spec_decode_num_accepted_tokens > 0
    assert [o.outputs[0].token_ids for o in out] == [o.outputs[0].token_ids for o in plain]


def test_bad_draft_models_fail_at_startup(tiny_llama, tmp_path):
    with pytest.raises(ModelLoadError):
        LLM(str(tiny_llama), speculative_config=_draft(tmp_path / "missing"))
    short = make_tiny_checkpoint(tmp_path, "llama", max_position_embeddings=64)
    with pytest.raises(InvalidRequestError, match="fewer than max_model_len"):
        LLM(str(tiny_llama), max_model_len=256, speculative_config=_draft(short))
