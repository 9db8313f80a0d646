"""The ``activation_quant`` engine option: validated at startup, resolved with its source, and given to the model's
quantized linear layers as an argument of their ops, so two engines in one process keep their own setting."""

from __future__ import annotations

import pytest
import torch

from revolta_engine import LLM, SamplingParams
from revolta_engine.config import ResolvedValue
from revolta_engine.errors import InvalidRequestError
from revolta_engine.quantize import quantize_checkpoint

GREEDY = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
PROJECTIONS = ("self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj")
KW = dict(dtype="float32", max_model_len=128, max_num_seqs=4)
ENV = "REVOLTA_ACTIVATION_QUANT"


@pytest.fixture(autouse=True)
def no_env(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)


def test_unknown_value_fails_at_construction_naming_the_choices(tiny_llama):
    with pytest.raises(InvalidRequestError, match="'int4'.*none, int8") as err:
        LLM(str(tiny_llama), activation_quant="int4", **KW)
    assert err.value.param == "activation_quant"


def test_unknown_env_value_fails_too(tiny_llama, monkeypatch):
    monkeypatch.setenv(ENV, "fp8")
    with pytest.raises(InvalidRequestError, match="'fp8'") as err:
        LLM(str(tiny_llama), **KW)
    assert err.value.param == "activation_quant"


@pytest.fixture(scope="module")
def tiny_awq(tiny_checkpoints, tmp_path_factory):
    """The tiny Llama as an AWQ int4 checkpoint (group 32)."""
    dst = tmp_path_factory.mktemp("awq") / "q"
    quantize_checkpoint(tiny_checkpoints["llama"], dst, "awq", 4, 32)
    return dst


def _projections(llm: LLM) -> dict[str, torch.nn.Module]:
    layer = llm.llm_engine.model.model.layers[0]
    return {name: layer.get_submodule(name) for name in PROJECTIONS}


def test_two_engines_in_one_process_keep_their_own_setting(tiny_awq):
    """An int8 engine built between two fp32 ones changes neither: its quantized layers round their decode
    activations to int8 (the reference path models the kernels' rounding), the others' do not."""
    first = LLM(str(tiny_awq), **KW)
    int8 = LLM(str(tiny_awq), activation_quant="int8", **KW)
    last = LLM(str(tiny_awq), **KW)
    assert int8.llm_engine.config.values["activation_quant"] == ResolvedValue("int8", "user")
    gen = torch.Generator().manual_seed(0)
    for name, layer in _projections(int8).items():
        assert layer.int8_activations, name
        plain_a, plain_b = _projections(first)[name], _projections(last)[name]
        assert not plain_a.int8_activations and not plain_b.int8_activations, name
        x = torch.randn(2, layer.in_features, generator=gen)
        want = plain_a(x)
        assert torch.equal(plain_b(x), want), name
        got = layer(x)
        assert not torch.equal(got, want), f"{name}: int8_activations did not reach the op"
        assert float(torch.linalg.norm(got - want) / torch.linalg.norm(want)) < 3e-2, name
    prompt = {"prompt_token_ids": [5, 9, 17, 33, 2, 41]}
    assert len(int8.generate(prompt, GREEDY)[0].outputs[0].token_ids) == GREEDY.max_tokens
    first_ids = first.generate(prompt, GREEDY)[0].outputs[0].token_ids
    assert first_ids == last.generate(prompt, GREEDY)[0].outputs[0].token_ids


def test_dense_models_have_no_setting_to_change(tiny_llama):
    llm = LLM(str(tiny_llama), activation_quant="int8", **KW)
    assert not any(hasattr(m, "int8_activations") for m in llm.llm_engine.model.modules())


def test_env_sets_it_and_an_explicit_argument_wins(tiny_llama, monkeypatch):
    monkeypatch.setenv(ENV, "int8")
    engine = LLM(str(tiny_llama), **KW).llm_engine
    assert engine.config.values["activation_quant"] == ResolvedValue("int8", "env")
    assert ("activation_quant", "int8", "env") in engine.config_report()
    engine = LLM(str(tiny_llama), activation_quant="none", **KW).llm_engine
    assert engine.config.values["activation_quant"] == ResolvedValue("none", "user")
