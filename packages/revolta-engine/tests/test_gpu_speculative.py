"""GPU (marker ``gpu``): n-gram speculative decoding and prompt logprobs on CUDA, where decode steps otherwise run
CUDA graphs and the sampled ids come back asynchronously."""

from __future__ import annotations

import random

import pytest
import torch

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
    rng = random.Random(0)
    out = []
    for i in range(n):
        motif = [rng.randrange(5, 400) for _ in range(5 + i % 4)]
        out.append({"prompt_token_ids": (motif * 10)[:30 + 7 * i]})
    return out


def test_gpu_speculative_greedy_equals_plain(gpu_llama):
    prompts = repetitive(12)
    params = SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)
    plain = LLM(gpu_llama, kv_cache_memory_bytes=256 << 20)
    want = [o.outputs[0].token_ids for o in plain.generate(prompts, params)]
    del plain
    spec = LLM(gpu_llama, kv_cache_memory_bytes=256 << 20,
               speculative_config={"method": "ngram", "num_speculative_tokens": 4})
    assert not spec.llm_engine.async_scheduling
    got = [o.outputs[0].token_ids for o in spec.generate(prompts, params)]
    assert got == want
    assert spec.llm_engine.get_stats().spec_decode_num_draft_tokens > 0


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
