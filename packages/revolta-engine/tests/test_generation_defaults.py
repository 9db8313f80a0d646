"""The model's recommended sampling defaults (vLLM's generation_config / override_generation_config)."""

from __future__ import annotations

import json
import shutil

import pytest

from revolta_engine import LLM, SamplingParams
from revolta_engine.engine.generation_defaults import sampling_defaults
from revolta_engine.errors import InvalidRequestError

QWEN3_GENERATION = {"bos_token_id": 1, "do_sample": True, "eos_token_id": [2, 3], "temperature": 0.6,
                    "top_k": 20, "top_p": 0.95, "transformers_version": "4.51.0"}


def test_auto_takes_the_sampling_keys_of_the_checkpoint_config():
    assert sampling_defaults(QWEN3_GENERATION) == {"temperature": 0.6, "top_p": 0.95, "top_k": 20}
    assert sampling_defaults({**QWEN3_GENERATION, "max_new_tokens": 512, "min_p": 0.05, "repetition_penalty": 1.1}
                             ) == {"temperature": 0.6, "top_p": 0.95, "top_k": 20, "min_p": 0.05,
                                   "repetition_penalty": 1.1, "max_tokens": 512}
    assert sampling_defaults({"bos_token_id": 1, "eos_token_id": 2}) == {}


def test_vllm_ignores_it_and_the_override_is_merged_on_top():
    assert sampling_defaults(QWEN3_GENERATION, "vllm") == {}
    assert sampling_defaults(QWEN3_GENERATION, "vllm", {"temperature": 0.2}) == {"temperature": 0.2}
    assert sampling_defaults(QWEN3_GENERATION, "auto", {"temperature": 0.2, "max_new_tokens": 7}) == {
        "temperature": 0.2, "top_p": 0.95, "top_k": 20, "max_tokens": 7}


def test_a_path_reads_that_generation_config(tmp_path):
    (tmp_path / "generation_config.json").write_text(json.dumps({"temperature": 0.3, "top_p": 0.5}))
    assert sampling_defaults(QWEN3_GENERATION, str(tmp_path)) == {"temperature": 0.3, "top_p": 0.5}
    assert sampling_defaults({}, str(tmp_path / "generation_config.json")) == {"temperature": 0.3, "top_p": 0.5}


@pytest.mark.parametrize("source, override, words", [
    ("auto", {"temprature": 0.5}, ["temprature", "temperature"]),
    ("auto", {"temperature": -1.0}, ["temperature"]),
    ("auto", {"max_new_tokens": 0}, ["max_tokens"]),
    ("/no/such/dir", None, ["/no/such/dir", "generation_config"]),
])
def test_bad_settings_are_refused_with_the_reason(source, override, words):
    with pytest.raises(InvalidRequestError) as info:
        sampling_defaults(QWEN3_GENERATION, source, override)
    assert all(w in str(info.value) for w in words), str(info.value)


@pytest.fixture(scope="module")
def greedy_by_default(tiny_llama, tmp_path_factory):
    """The tiny Llama with a generation config that asks for greedy sampling and at most 3 new tokens."""
    root = tmp_path_factory.mktemp("gen") / "tiny"
    shutil.copytree(tiny_llama, root)
    config = json.loads((root / "generation_config.json").read_text())
    (root / "generation_config.json").write_text(json.dumps({**config, "temperature": 0.0, "top_k": 20,
                                                             "max_new_tokens": 3}))
    return root


def test_offline_llm_uses_the_model_defaults(greedy_by_default):
    llm = LLM(str(greedy_by_default), dtype="float32", max_model_len=128)
    defaults = llm.get_default_sampling_params()
    assert (defaults.temperature, defaults.top_k, defaults.max_tokens) == (0.0, 20, 3)
    plain = llm.generate("def main():")[0].outputs[0]
    greedy = llm.generate("def main():", SamplingParams(temperature=0.0, max_tokens=3))[0].outputs[0]
    assert len(plain.token_ids) == 3 and plain.token_ids == greedy.token_ids
    assert llm.llm_engine.default_sampling == {"temperature": 0.0, "top_k": 20, "max_tokens": 3}


def test_generation_config_vllm_keeps_sampling_params_defaults(greedy_by_default):
    llm = LLM(str(greedy_by_default), dtype="float32", max_model_len=128, generation_config="vllm",
              override_generation_config={"max_new_tokens": 2}, trust_remote_code=True)  # vLLM's flag: accepted
    defaults = llm.get_default_sampling_params()
    assert (defaults.temperature, defaults.top_k, defaults.max_tokens) == (1.0, 0, 2)


def test_a_bad_override_stops_the_engine_at_startup(greedy_by_default):
    with pytest.raises(InvalidRequestError, match="override_generation_config"):
        LLM(str(greedy_by_default), dtype="float32", max_model_len=128, override_generation_config={"seed": 3})


def test_apply_sampling_defaults_fills_unset_values_and_limits_max_tokens():
    from revolta_engine.engine.generation_defaults import apply_sampling_defaults

    defaults = {"temperature": 0.6, "top_k": 20, "max_tokens": 8}
    assert apply_sampling_defaults({"temperature": None, "top_p": 0.5, "max_tokens": 50}, defaults) == {
        "temperature": 0.6, "top_k": 20, "top_p": 0.5, "max_tokens": 8}
    assert apply_sampling_defaults({"temperature": 0.0, "max_tokens": 3}, defaults)["max_tokens"] == 3
    assert apply_sampling_defaults({"temperature": 0.0}, {}) == {"temperature": 0.0}
