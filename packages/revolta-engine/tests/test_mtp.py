"""MTP speculative decoding (the checkpoint's own multi-token-prediction head) on the CPU: every draft the
engine proposes equals a float32 reference head recomputed from transformers' hidden states and decoder layer,
and greedy output equals transformers' (verification keeps the target's distribution)."""

from __future__ import annotations

import pytest
import torch
from spec_helpers import prompts, record_drafts

from revolta_engine import LLM, SamplingParams
from revolta_engine.errors import InvalidRequestError, UnsupportedModelError


@pytest.mark.parametrize(("family", "extra"), [
    ("qwen3_5", {}),
    ("qwen3_5", {"max_num_batched_tokens": 16}),  # the head catches up chunk by chunk
    ("qwen3_next", {"num_gpu_blocks_override": 14, "max_num_seqs": 8}),  # MoE head; preemption
    ("qwen3_5_moe", {}),
])
def test_mtp_drafts_equal_the_reference_head_and_output_is_greedy(tmp_path, family, extra):
    from hybrid_checkpoints import make_family_checkpoint
    from mtp_head import add_mtp_head, assert_drafts_match_reference
    from parity import assert_greedy_parity, reference_greedy
    from transformers import AutoModelForCausalLM

    path = make_family_checkpoint(tmp_path, family)
    head = add_mtp_head(path, family)
    ref = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    llm = LLM(str(path), dtype="float32", speculative_config={"method": "mtp", "num_speculative_tokens": 3},
              **extra)
    seen = record_drafts(llm)
    batch = prompts(6)
    params = SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True)
    outs = llm.generate(batch, params)
    assert len(seen) >= 20
    assert_drafts_match_reference(seen, ref, head)
    for p, out in zip(batch, outs, strict=True):
        ids = p["prompt_token_ids"]
        assert_greedy_parity(ref, ids, out.outputs[0].token_ids, reference_greedy(ref, ids, params.max_tokens))
    assert llm.llm_engine.draft.missed == 0  # type: ignore[union-attr]
    if extra.get("num_gpu_blocks_override"):
        assert llm.llm_engine.get_stats().num_preemptions > 0


def test_mtp_head_is_required_and_checked(tmp_path):
    from checkpoints import make_tiny_checkpoint
    from hybrid_checkpoints import make_family_checkpoint

    spec = {"method": "mtp", "num_speculative_tokens": 2}
    bare = make_family_checkpoint(tmp_path, "qwen3_5")
    with pytest.raises(InvalidRequestError, match="no MTP head"):
        LLM(str(bare), dtype="float32", speculative_config=spec)
    llama = make_tiny_checkpoint(tmp_path / "llama", "llama")
    with pytest.raises(UnsupportedModelError, match="MTP head"):
        LLM(str(llama), speculative_config=spec)
    with pytest.raises(InvalidRequestError, match="'model' belongs"):
        LLM(str(bare), speculative_config={**spec, "model": str(bare)})


def test_mtp_sampling_keeps_running_and_dummy_weights_load(tmp_path):
    """Random sampling with MTP drafts finishes every request (its distribution is the n-gram path's, tested
    there); a dummy-weight engine builds a random head for speed runs."""
    from hybrid_checkpoints import make_family_checkpoint
    from mtp_head import add_mtp_head

    path = make_family_checkpoint(tmp_path, "qwen3_5")
    add_mtp_head(path, "qwen3_5")
    llm = LLM(str(path), dtype="float32", seed=0,
              speculative_config={"method": "qwen3_next_mtp", "num_speculative_tokens": 2})
    outs = llm.generate(prompts(4), SamplingParams(temperature=1.0, max_tokens=12, ignore_eos=True, seed=5))
    assert all(len(o.outputs[0].token_ids) == 12 for o in outs)
    assert llm.llm_engine.get_stats().spec_decode_num_draft_tokens > 0
    dummy = LLM(str(path), dtype="float32", load_format="dummy",
                speculative_config={"method": "mtp", "num_speculative_tokens": 2})
    out = dummy.generate(prompts(1), SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True))
    assert len(out[0].outputs[0].token_ids) == 6


@pytest.mark.parametrize("head_bits", ["quantized", "16-bit"])
def test_mtp_on_an_awq_checkpoint_with_its_head_quantized_or_not(tmp_path, head_bits):
    """Quantizers either quantize the head with the rest or leave it in 16 bits; the tensors decide how it is
    built. Drafts equal the reference head on the dequantized model's hidden states (16-bit head), or the drafts
    of the same engine over the dequantized checkpoint (quantized head: the same dequantized weights)."""
    from hybrid_checkpoints import make_family_checkpoint
    from mtp_head import add_mtp_head, assert_drafts_match_reference
    from safetensors.torch import load_file, save_file
    from transformers import AutoModelForCausalLM

    from revolta_engine.quantize import quantize_checkpoint

    src = make_family_checkpoint(tmp_path, "qwen3_5")
    head = add_mtp_head(src, "qwen3_5")
    q, d = tmp_path / "q", tmp_path / "d"
    quantize_checkpoint(src, q, "awq", 4, 32, dequantized_dst=d)
    if head_bits == "16-bit":
        weights = {k: v for k, v in load_file(q / "model.safetensors").items() if not k.startswith("mtp.")}
        weights.update({k: v for k, v in load_file(src / "model.safetensors").items() if k.startswith("mtp.")})
        save_file(weights, q / "model.safetensors", metadata={"format": "pt"})
    spec = {"method": "mtp", "num_speculative_tokens": 3}
    llm = LLM(str(q), dtype="float32", speculative_config=spec)
    qkv = llm.llm_engine.draft.head.layers[0].self_attn.qkv_proj  # type: ignore[union-attr]
    assert (qkv.quant is not None) == (head_bits == "quantized")
    seen = record_drafts(llm)
    params = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
    llm.generate(prompts(4), params)
    assert len(seen) >= 10
    if head_bits == "16-bit":
        ref = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
        assert_drafts_match_reference(seen, ref, head)
    else:
        dense = LLM(str(d), dtype="float32", speculative_config=spec)
        dense_seen = record_drafts(dense)
        dense.generate(prompts(4), params)
        assert seen == dense_seen


def test_mtp_drafts_after_a_prefix_hit_read_the_right_head_entries(tmp_path):
    """A prompt sharing two blocks with an earlier one: the hit stops a block early (the head's entry at the last
    shared position reads the token after it, which differs), and every draft equals the reference head's."""
    from hybrid_checkpoints import make_family_checkpoint
    from mtp_head import add_mtp_head, assert_drafts_match_reference
    from transformers import AutoModelForCausalLM

    path = make_family_checkpoint(tmp_path, "qwen3_5")
    head = add_mtp_head(path, "qwen3_5")
    ref = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    llm = LLM(str(path), dtype="float32", block_size=16,
              speculative_config={"method": "mtp", "num_speculative_tokens": 3})
    first = prompts(8)[-1]["prompt_token_ids"][:48]
    params = SamplingParams(temperature=0.0, max_tokens=10, ignore_eos=True)
    llm.generate({"prompt_token_ids": first}, params)
    seen = record_drafts(llm)
    out = llm.generate({"prompt_token_ids": first[:32] + [7, 8, 9, 10, 11]}, params)[0]
    assert out.num_cached_tokens == 16  # two blocks match, one is used
    assert seen
    assert_drafts_match_reference(seen, ref, head)


def test_mtp_on_a_multimodal_qwen3_5_checkpoint(tmp_path):
    """Qwen3_5ForConditionalGeneration keeps its text model under model.language_model. and the head under mtp."""
    from hybrid_checkpoints import make_multimodal_qwen3_5_checkpoint
    from mtp_head import add_mtp_head, assert_drafts_match_reference
    from transformers import Qwen3_5ForConditionalGeneration

    path = make_multimodal_qwen3_5_checkpoint(tmp_path)
    head = add_mtp_head(path, "qwen3_5")
    ref = Qwen3_5ForConditionalGeneration.from_pretrained(path, dtype=torch.float32).eval()
    llm = LLM(str(path), dtype="float32", speculative_config={"method": "mtp", "num_speculative_tokens": 2})
    seen = record_drafts(llm)
    llm.generate(prompts(3), SamplingParams(temperature=0.0, max_tokens=10, ignore_eos=True))
    assert len(seen) >= 5
    assert_drafts_match_reference(seen, ref, head)
