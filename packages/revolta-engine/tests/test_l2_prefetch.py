"""The decode weight prefetch (revolta_engine.layers.l2_prefetch): its plan on the CPU; on a GPU (marker ``gpu``)
greedy decoding through CUDA graphs is the same with it on and off, for fp16 and AWQ weights."""

from __future__ import annotations

import pytest
import torch

import revolta_kernels
from revolta_engine import LLM, SamplingParams
from revolta_engine.layers import l2_prefetch
from revolta_engine.layers.l2_prefetch import WeightPrefetch, prefetch_active
from revolta_engine.layers.linear import Linear
from revolta_engine.layers.quant.config import QuantConfig
from revolta_engine.layers.quant.method import make_linear_method


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _awq(k: int, n: int) -> Linear:
    layer = Linear(k, n, quant=make_linear_method(QuantConfig("awq", 4, 128), "mlp.gate_up_proj"))
    layer.scales.data = layer.scales.data.half()
    return layer


def test_plan_takes_whole_layers_then_the_same_leading_share_of_the_next():
    o, gate_up = Linear(256, 128), _awq(512, 2048)
    o.weight.data = o.weight.data.half()
    o_bytes = _nbytes(o.weight)
    gu = gate_up.streamed_weights()
    gu_bytes = sum(_nbytes(t) for t in gu)
    budget = o_bytes + gu_bytes // 3
    tensors, nbytes = WeightPrefetch([o, gate_up]).plan(budget)
    assert tensors[0].data_ptr() == o.weight.data_ptr() and nbytes[0] == o_bytes
    assert [t.data_ptr() for t in tensors[1:]] == [t.data_ptr() for t in gu]
    assert sum(nbytes) <= budget and all(n % 16 == 0 for n in nbytes)
    for t, n in zip(tensors[1:], nbytes[1:], strict=True):  # qweight, scales, zeros: one third each
        assert abs(n / _nbytes(t) - 1 / 3) < 0.01


def test_plan_of_a_large_budget_is_everything_and_of_none_is_nothing():
    o, gate_up = _awq(256, 256), _awq(256, 1024)
    everything = [*o.streamed_weights(), *gate_up.streamed_weights()]
    tensors, nbytes = WeightPrefetch([o, gate_up]).plan(2**30)
    assert [t.data_ptr() for t in tensors] == [t.data_ptr() for t in everything]
    assert nbytes == [_nbytes(t) for t in everything]
    assert WeightPrefetch([o, gate_up]).plan(0) == ([], [])
    assert WeightPrefetch([o, gate_up]).plan(15) == ([], [])


def test_budget_from_the_environment(monkeypatch):
    l2_prefetch.budget_bytes.cache_clear()
    monkeypatch.setenv("REVOLTA_L2_PREFETCH_MB", "1.5")
    assert l2_prefetch.budget_bytes(0) == 3 * 2**19
    for bad in ("lots", "-1"):
        l2_prefetch.budget_bytes.cache_clear()
        monkeypatch.setenv("REVOLTA_L2_PREFETCH_MB", bad)
        with pytest.raises(ValueError, match="REVOLTA_L2_PREFETCH_MB"):
            l2_prefetch.budget_bytes(0)
    l2_prefetch.budget_bytes.cache_clear()


def test_cpu_steps_do_not_prefetch():
    assert not prefetch_active(torch.zeros(1, 64))
    WeightPrefetch([Linear(64, 64)]).issue(torch.zeros(1, 64))  # returns without touching CUDA
    l2_prefetch.join_prefetch(torch.zeros(1, 64))


def _greedy(path: str, mb: str, monkeypatch) -> list[list[int]]:
    monkeypatch.setenv("REVOLTA_L2_PREFETCH_MB", mb)
    l2_prefetch.budget_bytes.cache_clear()
    try:
        llm = LLM(path, dtype="float16", max_model_len=512, max_num_seqs=4, kv_cache_memory_bytes=2**30)
        assert llm.llm_engine.runner.graph_runner is not None, "graphs were not captured"
        g = torch.Generator().manual_seed(5)
        prompts = [{"prompt_token_ids": torch.randint(3, 500, (n,), generator=g).tolist()} for n in (9, 30, 70)]
        outs = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True))
        single = llm.generate(prompts[:1], SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True))
        return [o.outputs[0].token_ids for o in outs + single]
    finally:
        l2_prefetch.budget_bytes.cache_clear()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or not revolta_kernels.native_available(),
                    reason="needs a CUDA GPU and the native library")
@pytest.mark.parametrize("method", [None, "awq"])
def test_gpu_greedy_is_the_same_with_and_without_prefetch(tmp_path, monkeypatch, method):
    from checkpoints import make_tiny_checkpoint

    path = make_tiny_checkpoint(tmp_path / "llama", "llama", hidden_size=256, num_attention_heads=4,
                                num_key_value_heads=2, head_dim=64, intermediate_size=512, num_hidden_layers=4)
    if method is not None:
        from revolta_engine.quantize import quantize_checkpoint

        quantize_checkpoint(path, tmp_path / "q", method, 4, 128, False)
        path = tmp_path / "q"
    off = _greedy(str(path), "0", monkeypatch)
    on = _greedy(str(path), "64", monkeypatch)
    assert on == off
