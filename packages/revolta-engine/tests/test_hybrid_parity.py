"""Tiny random MoE and hybrid (Gated DeltaNet + attention) checkpoints decode greedily like transformers.

Covers prompts of 5, 40 and 130 tokens (longer than one 64-token delta-rule chunk), chunked prefill with a
16-token budget, a prefix-cache hit on a shared 64-token prefix, and 8 requests batched together.
"""

from __future__ import annotations

import pytest
import torch
from hybrid_checkpoints import make_family_checkpoint
from parity import assert_greedy_parity, reference_greedy
from transformers import AutoModelForCausalLM

from revolta_engine import LLM, SamplingParams

GREEDY = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
FAMILIES = ["qwen3_moe", "qwen3_next", "qwen3_5", "qwen3_5_moe"]


@pytest.fixture(scope="module")
def family_checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("hybrid")
    return {}, root


def _checkpoint(family_checkpoints, family):
    cache, root = family_checkpoints
    if family not in cache:
        path = make_family_checkpoint(root, family)
        cache[family] = (path, AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval())
    return cache[family]


def _prompts(vocab: int, lengths, seed: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(3, vocab, (n,), generator=gen).tolist() for n in lengths]


def _check(ref_model, prompts, outs):
    for prompt, out in zip(prompts, outs, strict=True):
        ref = reference_greedy(ref_model, prompt, GREEDY.max_tokens)
        assert_greedy_parity(ref_model, prompt, out.outputs[0].token_ids, ref)


@pytest.mark.parametrize("family", FAMILIES)
def test_prompts_of_5_40_130_tokens(family_checkpoints, family):
    path, ref_model = _checkpoint(family_checkpoints, family)
    llm = LLM(str(path), dtype="float32", block_size=16, max_model_len=512)
    prompts = _prompts(ref_model.config.vocab_size, (5, 40, 130), seed=1)
    _check(ref_model, prompts, [llm.generate({"prompt_token_ids": p}, GREEDY)[0] for p in prompts])


@pytest.mark.parametrize("family", FAMILIES)
def test_chunked_prefill_16_token_budget(family_checkpoints, family):
    path, ref_model = _checkpoint(family_checkpoints, family)
    llm = LLM(str(path), dtype="float32", max_num_batched_tokens=16, max_model_len=512)
    prompts = _prompts(ref_model.config.vocab_size, (130, 37), seed=2)
    _check(ref_model, prompts, llm.generate([{"prompt_token_ids": p} for p in prompts], GREEDY))


@pytest.mark.parametrize("family", FAMILIES)
def test_prefix_cache_hit_on_shared_64_token_prefix(family_checkpoints, family):
    path, ref_model = _checkpoint(family_checkpoints, family)
    llm = LLM(str(path), dtype="float32", block_size=16, max_model_len=512, enable_prefix_caching=True)
    vocab = ref_model.config.vocab_size
    shared = _prompts(vocab, (64,), seed=3)[0]
    tails = _prompts(vocab, (21, 9), seed=4)
    prompts = [shared + t for t in tails]
    first = llm.generate({"prompt_token_ids": prompts[0]}, GREEDY)[0]
    second = llm.generate({"prompt_token_ids": prompts[1]}, GREEDY)[0]
    assert second.num_cached_tokens == 64
    _check(ref_model, prompts, [first, second])


@pytest.mark.parametrize("family", FAMILIES)
def test_eight_requests_batched(family_checkpoints, family):
    path, ref_model = _checkpoint(family_checkpoints, family)
    llm = LLM(str(path), dtype="float32", block_size=16, max_model_len=512)
    prompts = _prompts(ref_model.config.vocab_size, (5, 40, 130, 17, 64, 1, 90, 33), seed=5)
    _check(ref_model, prompts, llm.generate([{"prompt_token_ids": p} for p in prompts], GREEDY))


def test_preemption_recomputes_and_finish_or_abort_free_state_slots(family_checkpoints):
    path, ref_model = _checkpoint(family_checkpoints, "qwen3_5")
    # 12 blocks of 16 tokens: 8 requests of ~50 tokens cannot all stay resident.
    llm = LLM(str(path), dtype="float32", max_model_len=512, num_gpu_blocks_override=12)
    engine = llm.llm_engine
    prompts = _prompts(ref_model.config.vocab_size, (40,) * 8, seed=6)
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts], GREEDY)
    assert engine.get_stats().num_preemptions > 0
    _check(ref_model, prompts, outs)
    slots = engine.kv.state_slots
    assert not slots.owner and slots.num_free == slots.num_running
    engine.add_request("a", {"prompt_token_ids": prompts[0]}, SamplingParams(max_tokens=50, ignore_eos=True))
    engine.step()
    assert "a" in slots.owner and slots.num_free == slots.num_running - 1
    engine.abort_request(["a"])
    assert not slots.owner and slots.num_free == slots.num_running
    assert engine.get_stats().kv_cache_usage == 0.0


def test_multimodal_checkpoint_loads_its_language_model(tmp_path):
    from hybrid_checkpoints import make_multimodal_qwen3_5_checkpoint
    from transformers import Qwen3_5ForConditionalGeneration

    path = make_multimodal_qwen3_5_checkpoint(tmp_path)
    ref_model = Qwen3_5ForConditionalGeneration.from_pretrained(path, dtype=torch.float32).eval()
    llm = LLM(str(path), dtype="float32", block_size=16, max_model_len=512)
    prompts = _prompts(ref_model.config.text_config.vocab_size, (40,), seed=7)
    _check(ref_model, prompts, llm.generate([{"prompt_token_ids": p} for p in prompts], GREEDY))


def test_stacked_expert_tensors_load_like_per_expert_ones(family_checkpoints, tmp_path):
    """Qwen3.5-MoE checkpoints may ship ``experts.gate_up_proj`` [E, 2I, H] / ``experts.down_proj`` [E, H, I]."""
    import re
    import shutil

    from safetensors.torch import load_file, save_file

    path, ref_model = _checkpoint(family_checkpoints, "qwen3_5_moe")
    fused = tmp_path / "fused"
    shutil.copytree(path, fused)
    state = load_file(str(fused / "model.safetensors"))
    experts: dict[str, dict[tuple[int, str], torch.Tensor]] = {}
    for name in list(state):
        m = re.match(r"(.*\.experts)\.(\d+)\.(\w+)\.weight$", name)
        if m:
            experts.setdefault(m.group(1), {})[(int(m.group(2)), m.group(3))] = state.pop(name)
    assert experts
    for prefix, parts in experts.items():
        n = 1 + max(e for e, _ in parts)
        state[f"{prefix}.gate_up_proj"] = torch.stack(
            [torch.cat([parts[(e, "gate_proj")], parts[(e, "up_proj")]]) for e in range(n)])
        state[f"{prefix}.down_proj"] = torch.stack([parts[(e, "down_proj")] for e in range(n)])
    save_file(state, str(fused / "model.safetensors"), metadata={"format": "pt"})
    prompts = _prompts(ref_model.config.vocab_size, (40,), seed=8)
    outs = LLM(str(fused), dtype="float32", max_model_len=512).generate({"prompt_token_ids": prompts[0]}, GREEDY)
    _check(ref_model, prompts, outs)
