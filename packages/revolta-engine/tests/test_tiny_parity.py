"""Tiny random Llama, Qwen2 and Qwen3 checkpoints decode greedily exactly like transformers."""

from __future__ import annotations

import pytest
import torch
from parity import assert_greedy_parity, reference_greedy
from transformers import AutoModelForCausalLM

from revolta_engine import LLM, SamplingParams

GREEDY = SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True)


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
def test_greedy_matches_transformers(tiny_checkpoints, arch):
    path = tiny_checkpoints[arch]
    ref_model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    llm = LLM(str(path), dtype="float32", block_size=16, max_model_len=512)
    vocab = ref_model.config.vocab_size
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(3, vocab, (n,), generator=gen).tolist() for n in (5, 40, 130)]
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts], GREEDY)
    for prompt, out in zip(prompts, outs, strict=True):
        ref = reference_greedy(ref_model, prompt, GREEDY.max_tokens)
        assert_greedy_parity(ref_model, prompt, out.outputs[0].token_ids, ref)


@pytest.mark.parametrize("budget", [16, 7])
def test_chunked_prefill_matches_transformers(tiny_checkpoints, budget):
    path = tiny_checkpoints["qwen3"]
    ref_model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    llm = LLM(str(path), dtype="float32", max_num_batched_tokens=budget, max_model_len=512)
    prompt = torch.randint(3, ref_model.config.vocab_size, (130,), generator=torch.Generator().manual_seed(2)).tolist()
    out = llm.generate({"prompt_token_ids": prompt}, GREEDY)[0]
    assert_greedy_parity(ref_model, prompt, out.outputs[0].token_ids, reference_greedy(ref_model, prompt, 16))


def test_tied_embeddings_load_and_match(tmp_path):
    from checkpoints import make_tiny_checkpoint

    path = make_tiny_checkpoint(tmp_path / "tied", "llama", tie_word_embeddings=True)
    ref_model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    llm = LLM(str(path), dtype="float32", max_model_len=256)
    prompt = list(range(5, 45))
    out = llm.generate({"prompt_token_ids": prompt}, GREEDY)[0]
    assert_greedy_parity(ref_model, prompt, out.outputs[0].token_ids, reference_greedy(ref_model, prompt, 16))
