"""The batch-1 decode path of fp16 models
takes the fused residual add + RMSNorm + GEMV (``revolta::dense_linear_add_rms_norm``) for every pre-norm projection
it should: Llama's qkv and gate_up, the hybrid models' GDN in_proj / attention qkv and dense MLP gate_up (marker
``gpu``). Counted at the op's Python entry, eagerly and while CUDA graphs are captured."""

from __future__ import annotations

import pytest
import torch

import revolta_kernels
from revolta_engine import LLM, SamplingParams
from revolta_kernels import ops_quant

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(not revolta_kernels.native_available(), reason=revolta_kernels.native_status()),
]

TOKENS = 6


def _llama(root):
    from checkpoints import make_tiny_checkpoint

    return make_tiny_checkpoint(root / "llama", "llama", hidden_size=256, num_attention_heads=4,
                                num_key_value_heads=2, head_dim=64, intermediate_size=512, num_hidden_layers=4)


def _hybrid(root, family):
    from hybrid_checkpoints import make_family_checkpoint

    return make_family_checkpoint(root, family, head_dim=64, linear_key_head_dim=64, linear_value_head_dim=64)


# family -> fused calls per decode step (4 layers each): Llama qkv + gate_up; qwen3_5 mixer + dense MLP;
# qwen3_5_moe the mixer only (the MoE block's norm is the router's business)
PER_STEP = {"llama": 8, "qwen3_5": 8, "qwen3_5_moe": 4}


@pytest.mark.parametrize("family", list(PER_STEP))
@pytest.mark.parametrize("eager", [True, False])
def test_fp16_decode_fuses_the_prenorms(tmp_path, monkeypatch, family, eager):
    path = _llama(tmp_path) if family == "llama" else _hybrid(tmp_path, family)
    calls: list[int] = []
    real = ops_quant.dense_linear_add_rms_norm

    def counted(x, *args):
        calls.append(x.numel() // x.shape[-1])
        return real(x, *args)

    monkeypatch.setattr(ops_quant, "dense_linear_add_rms_norm", counted)
    llm = LLM(str(path), dtype="float16", max_model_len=256, max_num_seqs=4, kv_cache_memory_bytes=2**30,
              enforce_eager=eager)
    captured = len(calls)
    if not eager:  # the graph capture of batch size 1 traces a forward through the fused op
        assert captured >= PER_STEP[family], captured
    calls.clear()
    out = llm.generate([{"prompt_token_ids": list(range(3, 23))}],
                       SamplingParams(temperature=0.0, max_tokens=TOKENS, ignore_eos=True))
    assert len(out[0].outputs[0].token_ids) == TOKENS
    assert all(rows == 1 for rows in calls)
    if eager:  # TOKENS - 1 decode steps at batch 1 (the prefill of 20 rows is not fused)
        assert len(calls) >= PER_STEP[family] * (TOKENS - 1), calls
