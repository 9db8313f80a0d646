"""A quantized (AWQ int4 g128) Llama's batch-1 decode takes the q/k/v projection with rotary and the KV-cache write
in its epilogue (``revolta::quant_qkv_rope_cache``, one kernel instead of the projection + the rotary kernel) in
every layer, eagerly and under CUDA graphs, and decodes the same greedy tokens as the two-kernel path (the fused
kernel refused, so the op falls back; its sums and roundings are the two-kernel path's). Marker ``gpu``."""

from __future__ import annotations

import pytest
import torch

import revolta_kernels
from revolta_engine import LLM, SamplingParams
from revolta_engine.quantize import quantize_checkpoint

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(not revolta_kernels.native_available(), reason=revolta_kernels.native_status()),
]

LAYERS, TOKENS = 3, 8
GREEDY = SamplingParams(temperature=0.0, max_tokens=TOKENS, ignore_eos=True)


@pytest.fixture(scope="module")
def awq_llama(tmp_path_factory):
    from checkpoints import make_tiny_checkpoint

    root = tmp_path_factory.mktemp("qkv_rope")
    # hidden 1024 (the split-K-free kernel needs K % 1024 == 0), 8 query / 2 KV heads of 128
    base = make_tiny_checkpoint(root / "base", "llama", hidden_size=1024, num_attention_heads=8,
                                num_key_value_heads=2, head_dim=128, intermediate_size=2048,
                                num_hidden_layers=LAYERS)
    return quantize_checkpoint(base, root / "awq", "awq", 4, 128)


@pytest.mark.parametrize("eager", [True, False])
def test_decode_fuses_rotary_into_the_qkv_projection(awq_llama, monkeypatch, eager):
    from revolta_kernels import native_qkv_rope

    taken: list[bool] = []
    real = native_qkv_rope.fused_launch
    refuse = False

    def counted(*args):
        out = None if refuse else real(*args)
        taken.append(out is not None)
        return out

    monkeypatch.setattr(native_qkv_rope, "fused_launch", counted)
    prompts = [{"prompt_token_ids": list(range(5, 40))}, {"prompt_token_ids": list(range(100, 117))}]
    kw = dict(dtype="float16", max_model_len=256, max_num_seqs=2, kv_cache_memory_bytes=2**28, enforce_eager=eager)
    llm = LLM(str(awq_llama), **kw)
    if not eager:  # the graph captures trace the decode forward through the fused kernel
        assert sum(taken) >= LAYERS, taken
    taken.clear()
    fused = [o.outputs[0].token_ids for o in llm.generate(prompts[:1], GREEDY)]
    if eager:  # TOKENS - 1 decode steps of one token, every layer taken (the prefill is not fused)
        assert sum(taken) >= LAYERS * (TOKENS - 1), taken
    both = [o.outputs[0].token_ids for o in llm.generate(prompts, GREEDY)]  # decode steps of 2 tokens too
    del llm
    refuse = True
    taken.clear()
    llm = LLM(str(awq_llama), **kw)
    assert [o.outputs[0].token_ids for o in llm.generate(prompts[:1], GREEDY)] == fused
    assert [o.outputs[0].token_ids for o in llm.generate(prompts, GREEDY)] == both
    assert not any(taken)
