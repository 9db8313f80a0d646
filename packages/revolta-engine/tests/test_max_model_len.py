"""max_model_len against the context the model was trained for (vLLM's check, same escape hatch)."""

from __future__ import annotations

import pytest
from transformers import LlamaConfig, Qwen3Config

from revolta_engine import LLM
from revolta_engine.config import trained_context_length
from revolta_engine.errors import InvalidRequestError


def test_trained_context_length_follows_the_rope_scaling():
    assert trained_context_length(Qwen3Config(max_position_embeddings=40960)) == 40960
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
    assert trained_context_length(Qwen3Config(max_position_embeddings=32768, rope_scaling=yarn)) == 131072
    llama3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
              "original_max_position_embeddings": 8192}
    assert trained_context_length(LlamaConfig(max_position_embeddings=131072, rope_scaling=llama3)) == 131072
    linear = {"rope_type": "linear", "factor": 2.0}
    assert trained_context_length(LlamaConfig(max_position_embeddings=4096, rope_scaling=linear)) == 8192


def test_max_model_len_past_the_trained_positions_is_refused_unless_allowed(tiny_llama, monkeypatch):
    with pytest.raises(InvalidRequestError, match="longer than the 512 positions"):
        LLM(str(tiny_llama), dtype="float32", max_model_len=1024)
    monkeypatch.setenv("REVOLTA_ALLOW_LONG_MAX_MODEL_LEN", "1")
    assert LLM(str(tiny_llama), dtype="float32", max_model_len=1024).llm_engine.max_model_len == 1024


def test_hf_overrides_yarn_serves_past_the_trained_positions_like_an_edited_config(tmp_path):
    """vLLM's hf_overrides (Qwen's YaRN recipe): the override equals writing the same rope settings into
    config.json, keeps the model's rope_theta, and lifts the max_model_len check to the scaled length."""
    import json

    import torch
    from checkpoints import make_tiny_checkpoint
    from parity import assert_greedy_parity, reference_greedy
    from transformers import AutoModelForCausalLM

    from revolta_engine import SamplingParams

    src = make_tiny_checkpoint(tmp_path, "qwen3", max_position_embeddings=64)
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
    with pytest.raises(InvalidRequestError, match="longer than the 64 positions"):
        LLM(str(src), dtype="float32", max_model_len=256)
    llm = LLM(str(src), dtype="float32", max_model_len=256, hf_overrides={"rope_scaling": yarn})
    rope = llm.llm_engine.hf_config.rope_parameters
    original_theta = json.loads((src / "config.json").read_text()).get("rope_parameters", {}).get("rope_theta")
    assert original_theta and rope["rope_type"] == "yarn" and rope["factor"] == 4.0 and rope["rope_theta"] == original_theta

    edited = tmp_path / "edited"
    edited.mkdir()
    for f in src.iterdir():
        (edited / f.name).write_bytes(f.read_bytes())
    config = json.loads((src / "config.json").read_text())
    config["rope_parameters"] = dict(rope)
    (edited / "config.json").write_text(json.dumps(config))
    ref_model = AutoModelForCausalLM.from_pretrained(edited, dtype=torch.float32).eval()
    prompt = torch.randint(3, ref_model.config.vocab_size, (150,), generator=torch.Generator().manual_seed(2)).tolist()
    greedy = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)
    out = llm.generate({"prompt_token_ids": prompt}, greedy)[0].outputs[0].token_ids
    assert out == LLM(str(edited), dtype="float32", max_model_len=256).generate(
        {"prompt_token_ids": prompt}, greedy)[0].outputs[0].token_ids
    assert_greedy_parity(ref_model, prompt, out, reference_greedy(ref_model, prompt, greedy.max_tokens))
    with pytest.raises(InvalidRequestError, match="rope_scaling must be a JSON object"):
        LLM(str(src), dtype="float32", max_model_len=64, hf_overrides={"rope_scaling": 4})
