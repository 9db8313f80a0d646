"""Qwen2 / Qwen2.5: the Llama block with biases on the q/k/v projections."""

from __future__ import annotations

from revolta_engine.models.llama import LlamaAttention, LlamaDecoderLayer, LlamaForCausalLM, LlamaModel


class Qwen2Attention(LlamaAttention):
    qkv_bias_default = True


class Qwen2DecoderLayer(LlamaDecoderLayer):
    attention_cls = Qwen2Attention


class Qwen2Model(LlamaModel):
    layer_cls = Qwen2DecoderLayer


class Qwen2ForCausalLM(LlamaForCausalLM):
    """Qwen2ForCausalLM."""

    model_cls = Qwen2Model
