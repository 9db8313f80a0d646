"""Qwen3-MoE: the Qwen3 block (q/k norm) with sparse mixture-of-experts feed-forward layers."""

from __future__ import annotations

from torch import nn
from transformers import PretrainedConfig

from revolta_engine.layers.moe import SparseMoeBlock
from revolta_engine.models.llama import LlamaDecoderLayer, LlamaForCausalLM, LlamaMLP
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

    def make_mlp(self, config: PretrainedConfig, layer_idx: int) -> nn.Module:
        if is_moe_layer(config, layer_idx):
            return SparseMoeBlock(config, renormalize=bool(config.norm_topk_prob), shared_expert=False,
                                  prefix=f"model.layers.{layer_idx}.mlp")
        return LlamaMLP(config, f"model.layers.{layer_idx}.mlp")


class Qwen3MoeForCausalLM(LlamaForCausalLM):
    """Qwen3MoeForCausalLM (Qwen3-30B-A3B, Qwen3-235B-A22B): Llama loading, plus per-expert tensors stacked into
    the experts' parameters."""

    attention_cls = Qwen3Attention
    layer_cls = Qwen3MoeDecoderLayer
    weight_loader_cls = MoeWeightLoader
