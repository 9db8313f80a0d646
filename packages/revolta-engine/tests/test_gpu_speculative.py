"""GPU (marker ``gpu``): n-gram speculative decoding and prompt logprobs on CUDA, where decode steps otherwise run
CUDA graphs and the sampled ids come back asynchronously."""

from __future__ import annotations

import pytest
import torch
from spec_helpers import repetitive_prompts

from revolta_engine import LLM, SamplingParams

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


@pytest.fixture(scope="module")
def gpu_llama(tmp_path_factory) -> str:
    from checkpoints import make_tiny_checkpoint

    return str(make_tiny_checkpoint(tmp_path_factory.mktemp("gpu") / "llama", "llama", hidden_size=256,
                                    num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                                    intermediate_size=512, num_hidden_layers=4))


def repetitive(n: int) -> list[dict]:
    return repetitive_prompts(n, motif=(5, 4), repeats=10, length=(30, 7))


def test_gpu_speculative_greedy_equals_plain_in_float32(gpu_llama):
    """Bookkeeping: in float32 the verification pass and plain decoding agree to far below any logit gap, so the
    greedy tokens must be equal."""
    prompts = repetitive(12)
    params = SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)
    plain = LLM(gpu_llama, dtype="float32", kv_cache_memory_bytes=256 << 20)
    want = [o.outputs[0].token_ids for o in plain.generate(prompts, params)]
    del plain
    spec = LLM(gpu_llama, dtype="float32", kv_cache_memory_bytes=256 << 20,
               speculative_config={"method": "ngram", "num_speculative_tokens": 4})
    assert spec.llm_engine.async_scheduling  # on with speculation too (the default on CUDA)
    got = [o.outputs[0].token_ids for o in spec.generate(prompts, params)]
    assert got == want
    assert spec.llm_engine.get_stats().spec_decode_num_draft_tokens > 0


def test_gpu_speculative_fp16_keeps_greedy_output(gpu_llama):
    """fp16 on the native kernels: the verification pass (several query tokens) and a decode step round
    differently, so the check is against float32 transformers, a difference allowed only at a genuine tie."""
    from parity import assert_greedy_parity, reference_greedy
    from transformers import AutoModelForCausalLM

    prompts = repetitive(12)
    params = SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)
    spec = LLM(gpu_llama, kv_cache_memory_bytes=256 << 20,
               speculative_config={"method": "ngram", "num_speculative_tokens": 4})
    outs = spec.generate(prompts, params)
    assert spec.llm_engine.get_stats().spec_decode_num_draft_tokens > 0
    ref = AutoModelForCausalLM.from_pretrained(gpu_llama, dtype=torch.float32).eval()
    for p, out in zip(prompts, outs, strict=True):
        ids = p["prompt_token_ids"]
        assert_greedy_parity(ref, ids, out.outputs[0].token_ids, reference_greedy(ref, ids, params.max_tokens))


def test_gpu_prompt_logprobs_match_a_float32_forward(gpu_llama):
    from transformers import AutoModelForCausalLM

    ids = list(range(5, 69))
    llm = LLM(gpu_llama, dtype="float32", kv_cache_memory_bytes=256 << 20, max_num_batched_tokens=32)
    out = llm.generate({"prompt_token_ids": ids}, SamplingParams(temperature=0.0, max_tokens=2, prompt_logprobs=1))[0]
    hf = AutoModelForCausalLM.from_pretrained(gpu_llama, dtype=torch.float32).eval()
    with torch.no_grad():
        ref = torch.log_softmax(hf(torch.tensor([ids])).logits[0].float(), -1)
    got = torch.tensor([out.prompt_logprobs[i][ids[i]].logprob for i in range(1, len(ids))])
    want = torch.tensor([ref[i - 1, ids[i]].item() for i in range(1, len(ids))])
    assert out.prompt_logprobs[0] is None
    assert torch.allclose(got, want, atol=2e-3), (got - want).abs().max()


def test_gpu_draft_model_keeps_greedy_output(gpu_llama):
    from parity import assert_greedy_parity, reference_greedy
    from transformers import AutoModelForCausalLM

    prompts = repetitive(6)
    params = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    spec = LLM(gpu_llama, kv_cache_memory_bytes=256 << 20,
               speculative_config={"model": gpu_llama, "num_speculative_tokens": 4})
    outs = spec.generate(prompts, params)
    stats = spec.llm_engine.get_stats()
    assert stats.spec_decode_num_accepted_tokens >= 0.8 * stats.spec_decode_num_draft_tokens > 0
    ref = AutoModelForCausalLM.from_pretrained(gpu_llama, dtype=torch.float32).eval()
    for p, out in zip(prompts, outs, strict=True):
        ids = p["prompt_token_ids"]
        assert_greedy_parity(ref, ids, out.outputs[0].token_ids, reference_greedy(ref, ids, params.max_tokens))


def test_gpu_hybrid_speculation_rolls_back_through_the_native_snapshots(tmp_path, monkeypatch):
    """Qwen3.5 in fp16 on the native Gated DeltaNet kernels: drafts kept for runs of every length, the state
    restored from per-position snapshots; greedy output as float32 transformers (ties allowed)."""
    from hybrid_checkpoints import make_family_checkpoint
    from parity import assert_greedy_parity, reference_greedy
    from spec_helpers import oracle_drafts
    from transformers import AutoModelForCausalLM

    path = make_family_checkpoint(tmp_path, "qwen3_5")
    ref = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    prompts = repetitive(6)
    params = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    expected = {tuple(p["prompt_token_ids"]): reference_greedy(ref, p["prompt_token_ids"], params.max_tokens)
                for p in prompts}
    monkeypatch.setattr("revolta_engine.engine.llm_engine.next_drafts",
                        oracle_drafts(expected, ref.config.vocab_size))
    spec = LLM(str(path), dtype="float16", kv_cache_memory_bytes=256 << 20,
               speculative_config={"method": "ngram", "num_speculative_tokens": 4})
    outs = spec.generate(prompts, params)
    stats = spec.llm_engine.get_stats()
    assert 0 < stats.spec_decode_num_accepted_tokens < stats.spec_decode_num_draft_tokens
    for p, out in zip(prompts, outs, strict=True):
        ids = p["prompt_token_ids"]
        assert_greedy_parity(ref, ids, out.outputs[0].token_ids, expected[tuple(ids)])


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_gpu_mtp_head_drafts_and_keeps_greedy_output(tmp_path, dtype):
    """Qwen3.5 with a random MTP head on CUDA (decode graphs where a step verifies nothing): in float32 every
    draft equals the float32 reference head's; in both dtypes greedy output is transformers' (ties allowed)."""
    from hybrid_checkpoints import make_family_checkpoint
    from mtp_head import add_mtp_head, assert_drafts_match_reference
    from parity import assert_greedy_parity, reference_greedy
    from spec_helpers import prompts, record_drafts
    from transformers import AutoModelForCausalLM

    path = make_family_checkpoint(tmp_path, "qwen3_5")
    head = add_mtp_head(path, "qwen3_5")
    ref = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    llm = LLM(str(path), dtype=dtype, kv_cache_memory_bytes=256 << 20,
              speculative_config={"method": "mtp", "num_speculative_tokens": 3})
    seen = record_drafts(llm)
    batch = prompts(6)
    params = SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True)
    outs = llm.generate(batch, params)
    assert len(seen) >= 20 and llm.llm_engine.draft.missed == 0
    if dtype == "float32":
        assert_drafts_match_reference(seen, ref, head)
    for p, out in zip(batch, outs, strict=True):
        ids = p["prompt_token_ids"]
        assert_greedy_parity(ref, ids, out.outputs[0].token_ids, reference_greedy(ref, ids, params.max_tokens))
