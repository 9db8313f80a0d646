"""Tensor parallelism over NCCL (marker ``gpu``, needs two GPUs): fp16 shards on two GPUs decode as the float32
model does, through the native kernels and asynchronous scheduling, for dense, quantized and hybrid models."""

from __future__ import annotations

import pytest
import torch
from checkpoints import make_tiny_checkpoint
from hybrid_checkpoints import make_family_checkpoint
from parity import assert_greedy_parity, reference_greedy
from transformers import AutoModelForCausalLM

from revolta_engine import LLM, SamplingParams
from revolta_engine.quantize import quantize_checkpoint

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs"),
]

GREEDY = SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True)
# native-kernel shapes: head_dim 64, projections that split into whole 128-channel groups
SIZES = dict(hidden_size=256, num_attention_heads=4, num_key_value_heads=2, head_dim=64, intermediate_size=512,
             num_hidden_layers=4)


def _check(path, ref_path=None, **engine) -> None:
    ref_model = AutoModelForCausalLM.from_pretrained(ref_path or path, dtype=torch.float32).eval()
    gen = torch.Generator().manual_seed(2)
    prompts = [torch.randint(3, ref_model.config.vocab_size, (n,), generator=gen).tolist() for n in (7, 33, 150)]
    with LLM(str(path), tensor_parallel_size=2, dtype="float16", max_model_len=512, device="cuda",
             gpu_memory_utilization=0.3, **engine) as llm:
        assert llm.llm_engine.async_scheduling
        outs = llm.generate([{"prompt_token_ids": p} for p in prompts], GREEDY)
    for prompt, out in zip(prompts, outs, strict=True):
        assert_greedy_parity(ref_model, prompt, out.outputs[0].token_ids,
                             reference_greedy(ref_model, prompt, GREEDY.max_tokens))


def test_dense_llama_on_two_gpus(tmp_path):
    _check(make_tiny_checkpoint(tmp_path, "llama", **SIZES))


def test_awq_llama_on_two_gpus(tmp_path):
    src = make_tiny_checkpoint(tmp_path / "src", "llama", **SIZES)
    quantize_checkpoint(src, tmp_path / "q", "awq", 4, 128, dequantized_dst=tmp_path / "dense")
    _check(tmp_path / "q", tmp_path / "dense")


@pytest.mark.parametrize("family", ["qwen3_5", "qwen3_5_moe"])
def test_hybrid_models_on_two_gpus(tmp_path, family):
    _check(make_family_checkpoint(tmp_path, family))


def test_mtp_head_on_two_gpus(tmp_path):
    """The MTP head split over two GPUs (NCCL: the head's row sums, the hidden states rank 0 broadcasts for chained
    drafts, the LM head's gather): output stays the float32 model's greedy, and every step has its drafts."""
    from mtp_head import add_mtp_head

    path = make_family_checkpoint(tmp_path, "qwen3_5")
    add_mtp_head(path, "qwen3_5")
    ref_model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    gen = torch.Generator().manual_seed(4)
    prompts = [torch.randint(3, ref_model.config.vocab_size, (n,), generator=gen).tolist() for n in (9, 40, 120)]
    with LLM(str(path), tensor_parallel_size=2, dtype="float16", max_model_len=512, device="cuda",
             gpu_memory_utilization=0.3, speculative_config={"method": "mtp", "num_speculative_tokens": 3}) as llm:
        outs = llm.generate([{"prompt_token_ids": p} for p in prompts], GREEDY)
        stats = llm.llm_engine.get_stats()
        assert llm.llm_engine.draft.missed == 0  # type: ignore[union-attr]
    assert stats.spec_decode_num_draft_tokens > 0
    for prompt, out in zip(prompts, outs, strict=True):
        assert_greedy_parity(ref_model, prompt, out.outputs[0].token_ids,
                             reference_greedy(ref_model, prompt, GREEDY.max_tokens))
