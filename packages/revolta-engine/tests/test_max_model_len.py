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
