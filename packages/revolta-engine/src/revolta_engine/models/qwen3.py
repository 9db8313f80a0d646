"""Qwen3 dense: the Llama block with per-head RMSNorm on queries and keys before rotary."""

from __future__ import annotations

from revolta_engine.models.llama import LlamaAttention, LlamaForCausalLM


class Qwen3Attention(LlamaAttention):
    """Llama attention with per-head RMSNorm on queries and keys."""

    qk_norm = True


class Qwen3ForCausalLM(LlamaForCausalLM):
    """Qwen3ForCausalLM."""

    attention_cls = Qwen3Attention
