"""Qwen2 / Qwen2.5: the Llama block with biases on the q/k/v projections."""

from __future__ import annotations

from revolta_engine.models.llama import LlamaAttention, LlamaForCausalLM


class Qwen2Attention(LlamaAttention):
    """Llama attention with biases on q/k/v unless the config says otherwise."""

    qkv_bias_default = True


class Qwen2ForCausalLM(LlamaForCausalLM):
    """Qwen2ForCausalLM."""

    attention_cls = Qwen2Attention
