"""Qwen3-MoE: the Qwen3 block (q/k norm) with sparse mixture-of-experts feed-forward layers."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn
from transformers import PretrainedConfig

from revolta_engine.layers.moe import SparseMoeBlock
from revolta_engine.layers.norm import RMSNorm
from revolta_engine.layers.rotary import RotaryEmbedding
from revolta_engine.models.llama import LlamaDecoderLayer, LlamaForCausalLM, LlamaMLP, LlamaModel
from revolta_engine.models.moe_weights import MoeWeightLoader
from revolta_engine.models.qwen3 import Qwen3Attention


def is_moe_layer(config: PretrainedConfig, layer_idx: int) -> bool:
    """transformers' rule: experts unless listed in ``mlp_only_layers``, every ``decoder_sparse_step`` layers."""
    num_experts = getattr(config, "num_experts", 0) or 0
    step = getattr(config, "decoder_sparse_step", 1) or 1
    return (layer_idx not in (getattr(config, "mlp_only_layers", None) or [])
            and num_experts > 0 and (layer_idx + 1) % step == 0)


class Qwen3MoeDecoderLayer(LlamaDecoderLayer):
    """Qwen3 attention + (sparse MoE or dense) MLP."""

    def __init__(self, config: PretrainedConfig, layer_idx: int, rotary: RotaryEmbedding) -> None:
        nn.Module.__init__(self)
        self.self_attn = Qwen3Attention(config, layer_idx, rotary)
        mlp: nn.Module = (
            SparseMoeBlock(config, renormalize=bool(config.norm_topk_prob), shared_expert=False,
                           prefix=f"model.layers.{layer_idx}.mlp")
            if is_moe_layer(config, layer_idx) else LlamaMLP(config, f"model.layers.{layer_idx}.mlp")
        )
        self.mlp = mlp  # type: ignore[assignment]
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)


class Qwen3MoeModel(LlamaModel):
    layer_cls = Qwen3MoeDecoderLayer


class Qwen3MoeForCausalLM(LlamaForCausalLM):
    """Qwen3MoeForCausalLM (Qwen3-30B-A3B, Qwen3-235B-A22B)."""

    model_cls = Qwen3MoeModel

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Like Llama, plus per-expert tensors stacked into the experts' parameters."""
        tie = self.tie_word_embeddings

        def skip(name: str) -> bool:
            return "rotary_emb.inv_freq" in name or (tie and name == "lm_head.weight")

        def renamed():
            for name, tensor in weights:
                yield ("lm_head" if name == "lm_head.weight" else name), tensor

        MoeWeightLoader(self, self.stacked_params, skip).load(renamed())
