"""Tensor parallelism on the CPU (gloo): each rank holds a shard, and the outputs are the whole model's."""

from __future__ import annotations

import multiprocessing

import pytest
import torch
from checkpoints import make_tiny_checkpoint
from hybrid_checkpoints import make_family_checkpoint
from parity import assert_greedy_parity, reference_greedy
from transformers import AutoModelForCausalLM

from revolta_engine import LLM, SamplingParams
from revolta_engine.errors import ModelLoadError, UnsupportedModelError
from revolta_engine.quantize import quantize_checkpoint

GREEDY = SamplingParams(temperature=0.0, max_tokens=10, ignore_eos=True)
ENGINE = dict(dtype="float32", max_model_len=256, kv_cache_memory_bytes=16 * 2**20)


def _prompts(vocab: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(11)
    return [torch.randint(3, vocab, (n,), generator=gen).tolist() for n in (5, 23, 40)]


def _generate(path, prompts, params=GREEDY, **kwargs):
    with LLM(str(path), tensor_parallel_size=2, **{**ENGINE, **kwargs}) as llm:
        outs = llm.generate([{"prompt_token_ids": p} for p in prompts], params)
    assert not multiprocessing.active_children(), "the worker processes outlived the engine"
    return outs


def _check_against_transformers(path, **kwargs) -> None:
    ref_model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    prompts = _prompts(ref_model.config.vocab_size)
    outs = _generate(path, prompts, **kwargs)
    for prompt, out in zip(prompts, outs, strict=True):
        ref = reference_greedy(ref_model, prompt, GREEDY.max_tokens)
        assert_greedy_parity(ref_model, prompt, out.outputs[0].token_ids, ref)


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
def test_two_ranks_decode_as_transformers(tiny_checkpoints, arch):
    # 4 query heads and 2 KV heads split over 2 ranks; qwen2 has q/k/v biases, qwen3 per-head q/k norms
    _check_against_transformers(tiny_checkpoints[arch])


def test_shared_kv_head_tied_embeddings_and_odd_vocabulary(tmp_path):
    # one KV head (copied to both ranks), tied embeddings, a vocabulary the ranks split unevenly (padding)
    path = make_tiny_checkpoint(tmp_path, "llama", num_key_value_heads=1, tie_word_embeddings=True, vocab_size=515)
    _check_against_transformers(path)


def test_chunked_prefill_and_preemption_across_ranks(tiny_llama):
    ref_model = AutoModelForCausalLM.from_pretrained(tiny_llama, dtype=torch.float32).eval()
    prompts = _prompts(ref_model.config.vocab_size)
    # 16-token chunks and too few blocks for all three at once: requests are preempted and recomputed
    outs = _generate(tiny_llama, prompts, max_num_batched_tokens=16, num_gpu_blocks_override=8, block_size=8,
                     enable_prefix_caching=True)
    for prompt, out in zip(prompts, outs, strict=True):
        assert_greedy_parity(ref_model, prompt, out.outputs[0].token_ids,
                             reference_greedy(ref_model, prompt, GREEDY.max_tokens))


def test_async_scheduling_feeds_broadcast_tokens(tiny_llama):
    # the next step's input is the token just sampled on rank 0, which the workers get by broadcast
    ref_model = AutoModelForCausalLM.from_pretrained(tiny_llama, dtype=torch.float32).eval()
    prompts = _prompts(ref_model.config.vocab_size)
    outs = _generate(tiny_llama, prompts, async_scheduling=True)
    for prompt, out in zip(prompts, outs, strict=True):
        assert_greedy_parity(ref_model, prompt, out.outputs[0].token_ids,
                             reference_greedy(ref_model, prompt, GREEDY.max_tokens))


def test_prompt_logprobs_and_sampling_match_one_rank(tiny_llama):
    params = SamplingParams(temperature=0.8, seed=5, max_tokens=8, logprobs=2, prompt_logprobs=1, ignore_eos=True)
    prompts = _prompts(512)[:2]
    two = _generate(tiny_llama, prompts, params)
    with LLM(str(tiny_llama), **ENGINE) as llm:
        one = llm.generate([{"prompt_token_ids": p} for p in prompts], params)
    for a, b in zip(one, two, strict=True):
        assert a.outputs[0].token_ids == b.outputs[0].token_ids
        for pa, pb in zip(a.prompt_logprobs[1:], b.prompt_logprobs[1:], strict=True):
            (ta, la), (tb, lb) = next(iter(pa.items())), next(iter(pb.items()))
            assert ta == tb and la.logprob == pytest.approx(lb.logprob, abs=1e-4)


def test_ngram_drafts_across_ranks(tiny_llama):
    prompt = [7, 8, 9, 10, 11] * 6
    spec = {"method": "ngram", "num_speculative_tokens": 3}
    two = _generate(tiny_llama, [prompt], speculative_config=spec)
    with LLM(str(tiny_llama), **ENGINE) as llm:
        one = llm.generate([{"prompt_token_ids": prompt}], GREEDY)
    assert two[0].outputs[0].token_ids == one[0].outputs[0].token_ids
    assert two[0].outputs[0].token_ids  # something was generated


@pytest.mark.parametrize(("method", "bits", "group"), [("awq", 4, 32), ("gptq", 4, 64), ("gptq", 8, 32)])
def test_quantized_checkpoints_split_over_ranks(tmp_path, method, bits, group):
    src = make_tiny_checkpoint(tmp_path / "src", "llama", hidden_size=128, intermediate_size=256, head_dim=32)
    quant_dir, dense_dir = tmp_path / "q", tmp_path / "dense"
    quantize_checkpoint(src, quant_dir, method, bits, group, False, dequantized_dst=dense_dir)
    _check_split_quantized(quant_dir, dense_dir)


def test_group_that_straddles_ranks_is_refused(tmp_path):
    # o_proj has 128 inputs: 64 per rank cannot hold whole groups of 128
    src = make_tiny_checkpoint(tmp_path / "src", "llama", hidden_size=128, intermediate_size=256, head_dim=32)
    quantize_checkpoint(src, tmp_path / "q", "awq", 4, 128)
    with pytest.raises(ModelLoadError, match="group size"):
        LLM(str(tmp_path / "q"), tensor_parallel_size=2, **ENGINE)
    assert not multiprocessing.active_children()


def test_act_order_gptq_is_refused_by_name(tmp_path):
    src = make_tiny_checkpoint(tmp_path / "src", "llama", hidden_size=128, intermediate_size=256, head_dim=32)
    quantize_checkpoint(src, tmp_path / "q", "gptq", 4, 32, act_order=True)
    with pytest.raises(ModelLoadError, match=r"(o|down)_proj\.g_idx.*desc_act"):
        LLM(str(tmp_path / "q"), tensor_parallel_size=2, **ENGINE)
    assert not multiprocessing.active_children()


def test_heads_that_do_not_split_are_refused(tmp_path):
    path = make_tiny_checkpoint(tmp_path, "llama", num_attention_heads=3, num_key_value_heads=3, hidden_size=48)
    with pytest.raises(UnsupportedModelError, match="num_attention_heads \\(3\\) is not divisible"):
        LLM(str(path), tensor_parallel_size=2, **ENGINE)
    assert not multiprocessing.active_children()


def test_unsupported_combinations_fail_at_startup(tiny_llama, tmp_path):
    with pytest.raises(ValueError, match="at least 1"):
        LLM(str(tiny_llama), tensor_parallel_size=0, **ENGINE)
    assert not multiprocessing.active_children()


@pytest.mark.parametrize("family", ["qwen3_moe", "qwen3_next", "qwen3_5", "qwen3_5_moe"])
def test_moe_and_hybrid_models_split_over_ranks(tmp_path, family):
    # experts split by channels (router replicated); Gated DeltaNet by key/value heads (conv rows, decay
    # parameters and recurrent state follow); gated attention by heads
    path = make_family_checkpoint(tmp_path, family)
    ref_model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    gen = torch.Generator().manual_seed(4)
    shared = torch.randint(3, ref_model.config.vocab_size, (64,), generator=gen).tolist()
    # a 130-token prompt (more than one delta-rule chunk), and two sharing a 64-token prefix: a state snapshot hit
    prompts = [torch.randint(3, ref_model.config.vocab_size, (130,), generator=gen).tolist(), shared + [5, 6],
               shared + [7, 8, 9]]
    with LLM(str(path), tensor_parallel_size=2, **{**ENGINE, "max_model_len": 512}) as llm:
        outs = [llm.generate({"prompt_token_ids": p}, GREEDY)[0] for p in prompts]
        assert llm.llm_engine.get_stats().prefix_cache_hits >= 64
    for prompt, out in zip(prompts, outs, strict=True):
        assert_greedy_parity(ref_model, prompt, out.outputs[0].token_ids,
                             reference_greedy(ref_model, prompt, GREEDY.max_tokens))


def test_one_split_engine_per_process_and_a_dropped_one_stops_its_workers(tiny_llama):
    import gc

    from revolta_engine.errors import InvalidRequestError

    llm = LLM(str(tiny_llama), tensor_parallel_size=2, **ENGINE)
    with pytest.raises(InvalidRequestError, match="still running"):
        LLM(str(tiny_llama), tensor_parallel_size=2, **ENGINE)
    assert len(multiprocessing.active_children()) == 1
    del llm
    gc.collect()
    assert not multiprocessing.active_children()
    assert _generate(tiny_llama, [[5, 6, 7]])[0].outputs[0].token_ids  # the process can start another


HYBRID_SHAPES = dict(hidden_size=128, intermediate_size=256, head_dim=32, linear_key_head_dim=32,
                     linear_value_head_dim=32)


@pytest.mark.parametrize(("family", "method", "bits", "group"), [
    # Qwen3.5 GPTQ group 64: the Gated DeltaNet's quantized in_proj keeps a slice of q, k, v and z on each rank
    ("qwen3_5", "gptq", 4, 64),
    # Qwen3.5 MoE AWQ group 32, experts quantized: each rank keeps 64 of every expert's 128 intermediate channels
    ("qwen3_5_moe", "awq", 4, 32),
])
def test_quantized_hybrid_models_split_over_ranks(tmp_path, family, method, bits, group):
    moe = dict(moe_intermediate_size=128, shared_expert_intermediate_size=128) if family.endswith("moe") else {}
    src = make_family_checkpoint(tmp_path / "src", family, **HYBRID_SHAPES, **moe)
    quantize_checkpoint(src, tmp_path / "q", method, bits, group, dequantized_dst=tmp_path / "dense")
    _check_split_quantized(tmp_path / "q", tmp_path / "dense")


def _check_split_quantized(quant_dir, dense_dir) -> None:
    """Two ranks of the quantized checkpoint decode greedily as transformers does with its dequantized twin."""
    ref_model = AutoModelForCausalLM.from_pretrained(dense_dir, dtype=torch.float32).eval()
    prompts = _prompts(ref_model.config.vocab_size)
    outs = _generate(quant_dir, prompts)
    for prompt, out in zip(prompts, outs, strict=True):
        assert_greedy_parity(ref_model, prompt, out.outputs[0].token_ids,
                             reference_greedy(ref_model, prompt, GREEDY.max_tokens))


def test_hybrid_speculation_rolls_back_on_every_rank(tmp_path, monkeypatch):
    from spec_helpers import oracle_drafts, repetitive_prompts

    path = make_family_checkpoint(tmp_path, "qwen3_5")
    prompts = repetitive_prompts(4)
    params = SamplingParams(temperature=0.0, max_tokens=30, ignore_eos=True)
    with LLM(str(path), **ENGINE) as one:
        plain = one.generate(prompts, params)
    expected = {tuple(p["prompt_token_ids"]): o.outputs[0].token_ids for p, o in zip(prompts, plain, strict=True)}
    monkeypatch.setattr("revolta_engine.engine.llm_engine.next_drafts", oracle_drafts(expected, 512))
    with LLM(str(path), tensor_parallel_size=2, speculative_config={"method": "ngram", "num_speculative_tokens": 3},
             **ENGINE) as llm:
        out = llm.generate(prompts, params)
        stats = llm.llm_engine.get_stats()
    assert [o.outputs[0].token_ids for o in out] == [o.outputs[0].token_ids for o in plain]
    assert 0 < stats.spec_decode_num_accepted_tokens < stats.spec_decode_num_draft_tokens


@pytest.mark.parametrize("family", ["qwen3_5", "qwen3_next"])
def test_mtp_head_splits_over_ranks(tmp_path, family):
    """MTP speculative decoding with the head split like the target (qwen3_next: a MoE head): every draft equals
    the float32 reference head's, and the output stays transformers' greedy."""
    from mtp_head import add_mtp_head, assert_drafts_match_reference
    from spec_helpers import prompts, record_drafts

    path = make_family_checkpoint(tmp_path, family)
    head = add_mtp_head(path, family)
    ref = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    batch = prompts(4)
    params = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
    with LLM(str(path), tensor_parallel_size=2, speculative_config={"method": "mtp", "num_speculative_tokens": 3},
             **{**ENGINE, "max_num_batched_tokens": 24}) as llm:  # prefill in chunks: the head catches up per chunk
        seen = record_drafts(llm)
        outs = llm.generate(batch, params)
        stats = llm.llm_engine.get_stats()
    assert not multiprocessing.active_children(), "the worker processes outlived the engine"
    assert len(seen) >= 10 and stats.spec_decode_num_draft_tokens > 0
    assert_drafts_match_reference(seen, ref, head)
    for p, out in zip(batch, outs, strict=True):
        ids = p["prompt_token_ids"]
        assert_greedy_parity(ref, ids, out.outputs[0].token_ids, reference_greedy(ref, ids, params.max_tokens))
