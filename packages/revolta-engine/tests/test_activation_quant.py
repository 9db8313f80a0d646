"""The ``activation_quant`` engine option: validated at startup, resolved with its source, a warning (not an error)
where the native quantized-weight kernels are not in use, and the native setting made either way on a CUDA engine."""

from __future__ import annotations

import logging
import types

import pytest
import torch

import revolta_kernels
from revolta_engine import LLM, SamplingParams
from revolta_engine.config import ResolvedValue
from revolta_engine.errors import InvalidRequestError
from revolta_engine.layers import activation_quant

GREEDY = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
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


def test_int8_on_the_cpu_warns_and_generates_as_without(tiny_llama, caplog):
    prompt = {"prompt_token_ids": [5, 9, 17, 33, 2, 41]}
    plain = LLM(str(tiny_llama), **KW)
    assert plain.llm_engine.resolver.values["activation_quant"] == ResolvedValue("none", "default")
    with caplog.at_level(logging.WARNING, logger=activation_quant.__name__):
        llm = LLM(str(tiny_llama), activation_quant="int8", **KW)
    warnings = [r.getMessage() for r in caplog.records if r.name == activation_quant.__name__]
    assert len(warnings) == 1 and "only affects the native CUDA quantized-weight kernels" in warnings[0], warnings
    assert "fp16/fp32 activations" in warnings[0]
    assert llm.llm_engine.resolver.values["activation_quant"] == ResolvedValue("int8", "user")
    got = llm.generate(prompt, GREEDY)[0].outputs[0].token_ids
    assert len(got) == GREEDY.max_tokens
    assert got == plain.generate(prompt, GREEDY)[0].outputs[0].token_ids  # the reference path is unchanged


def test_env_sets_it_and_an_explicit_argument_wins(tiny_llama, monkeypatch):
    monkeypatch.setenv(ENV, "int8")
    engine = LLM(str(tiny_llama), **KW).llm_engine
    assert engine.resolver.values["activation_quant"] == ResolvedValue("int8", "env")
    assert ("activation_quant", "int8", "env") in engine.config_report()
    engine = LLM(str(tiny_llama), activation_quant="none", **KW).llm_engine
    assert engine.resolver.values["activation_quant"] == ResolvedValue("none", "user")


def test_cuda_engine_sets_the_native_flag_both_ways(monkeypatch, caplog):
    """With the native kernels, "none" clears the flag too (an earlier engine may have set it); no CPU warning."""
    calls: list[bool] = []
    fake = types.SimpleNamespace(set_int8_activations=calls.append)
    monkeypatch.setattr(revolta_kernels, "native_available", lambda: True)
    monkeypatch.setattr(revolta_kernels, "native_quant", fake, raising=False)
    with caplog.at_level(logging.INFO, logger=activation_quant.__name__):
        activation_quant.apply_activation_quant("int8", torch.device("cuda", 0))
        activation_quant.apply_activation_quant("none", torch.device("cuda"))
    assert calls == [True, False]
    messages = [r.getMessage() for r in caplog.records if r.name == activation_quant.__name__]
    assert len(messages) == 1 and "not bit-equal" in messages[0] and caplog.records[0].levelno == logging.INFO


def test_without_native_kernels_nothing_is_set(monkeypatch):
    def fail(on: bool) -> None:
        raise AssertionError("set_int8_activations called without native kernels")

    monkeypatch.setattr(revolta_kernels, "native_available", lambda: False)
    monkeypatch.setattr(revolta_kernels, "native_quant", types.SimpleNamespace(set_int8_activations=fail),
                        raising=False)
    activation_quant.apply_activation_quant("none", torch.device("cuda"))
    activation_quant.apply_activation_quant("int8", torch.device("cuda"))
    activation_quant.apply_activation_quant("int8", torch.device("cpu"))
    with pytest.raises(InvalidRequestError):
        activation_quant.apply_activation_quant("INT8", torch.device("cpu"))
