"""Llama-family decoder (Llama 2/3.x, SmolLM2); Qwen2 and Qwen3 reuse it with flags."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn
from transformers import PretrainedConfig

from revolta_engine.errors import UnsupportedModelError
from revolta_engine.layers.attention import PagedAttention
from revolta_engine.layers.linear import Linear, MergedLinear
from revolta_engine.layers.mlp import SwiGLUMLP
from revolta_engine.layers.norm import AddNorm, RMSNorm
from revolta_engine.layers.quant import make_linear_method, parse_quant_config
from revolta_engine.layers.rotary import RotaryEmbedding
from revolta_engine.layers.vocab_parallel import VocabParallelEmbedding, VocabParallelHead
from revolta_engine.models.weights import WeightLoader, load_causal_lm
from revolta_engine.parallel.state import get_tp_layout


def attention_head_slices(num_heads: int, num_kv_heads: int, head_dim: int,
                          q_per_head: int = 1) -> tuple[int, int, list[list[tuple[int, int]]]]:
    """Tensor parallelism for attention: ``(query heads, KV heads, [[(start, size)]] of q, k and v)`` on this rank.
    ``q_per_head``: q outputs per head in units of ``head_dim`` (2 where each head's q is followed by its gate).

    Query heads are split evenly. KV heads too when there are at least as many as ranks; with fewer, each rank
    keeps the one KV head its query heads read (copied on several ranks), as vLLM does."""
    layout = get_tp_layout()
    tp, rank = layout.size, layout.rank
    if num_heads % tp:
        raise UnsupportedModelError(f"num_attention_heads ({num_heads}) is not divisible by tensor_parallel_size "
                                    f"{tp}")
    heads = num_heads // tp
    if num_kv_heads >= tp:
        if num_kv_heads % tp:
            raise UnsupportedModelError(f"num_key_value_heads ({num_kv_heads}) is not divisible by "
                                        f"tensor_parallel_size {tp}")
        kv_heads, kv_first = num_kv_heads // tp, rank * (num_kv_heads // tp)
    else:
        if tp % num_kv_heads:
            raise UnsupportedModelError(f"tensor_parallel_size {tp} is not a multiple of num_key_value_heads "
                                        f"({num_kv_heads}), so the KV heads cannot be shared out evenly")
        kv_heads, kv_first = 1, rank // (tp // num_kv_heads)
    kv = [(kv_first * head_dim, kv_heads * head_dim)]
    q_width = heads * head_dim * q_per_head
    return heads, kv_heads, [[(rank * q_width, q_width)], kv, kv]


class LlamaAttention(nn.Module):
    """Self-attention with fused q/k/v projection, rotary and paged KV cache."""

    qkv_bias_default = False
    qk_norm = False

    def __init__(self, config: PretrainedConfig, layer_idx: int, rotary: RotaryEmbedding) -> None:
        super().__init__()
        hidden = config.hidden_size
        total_heads = config.num_attention_heads
        total_kv_heads = getattr(config, "num_key_value_heads", None) or total_heads
        self.head_dim = getattr(config, "head_dim", None) or hidden // total_heads
        # this rank's heads (all of them on one rank)
        self.num_heads, self.num_kv_heads, slices = attention_head_slices(total_heads, total_kv_heads, self.head_dim)
        bias = getattr(config, "attention_bias", self.qkv_bias_default)
        q_size, kv_size = total_heads * self.head_dim, total_kv_heads * self.head_dim
        quant, name = parse_quant_config(config), f"model.layers.{layer_idx}.self_attn"
        self.qkv_proj = MergedLinear(hidden, [q_size, kv_size, kv_size], bias=bias, quant=make_linear_method(
            quant, f"{name}.qkv_proj", tuple(f"{name}.{p}_proj" for p in "qkv")), parallel="column",
            part_slices=slices)
        self.o_proj = Linear(q_size, hidden, bias=getattr(config, "attention_out_bias", False) and bias,
                             quant=make_linear_method(quant, f"{name}.o_proj"), parallel="row")
        if self.qk_norm:
            self.q_norm = RMSNorm(self.head_dim, config.rms_norm_eps)
            self.k_norm = RMSNorm(self.head_dim, config.rms_norm_eps)
        self.rotary = rotary
        self.attn = PagedAttention(self.num_heads, self.num_kv_heads, self.head_dim, self.head_dim**-0.5, layer_idx)

    def forward(self, positions: torch.Tensor, inp: AddNorm) -> tuple[torch.Tensor, torch.Tensor]:
        """Attention of ``norm(h)`` for ``h = inp.x + inp.residual`` (norm fused into q/k/v where it can be),
        and ``h``."""
        if not self.qk_norm:  # quantized decode: rotary and the cache write in the projection's kernel
            fused = self.attn.project_rotated(self.qkv_proj, inp, positions, self.rotary)
            if fused is not None:
                q, residual = fused
                return self.o_proj(self.attn.attend(q).reshape(-1, self.num_heads * self.head_dim)), residual
        qkv, residual = self.qkv_proj.forward_prenorm(inp)
        q, k, v = self.qkv_proj.split(qkv)
        q = q.view(-1, self.num_heads, self.head_dim)
        k = k.view(-1, self.num_kv_heads, self.head_dim)
        v = v.view(-1, self.num_kv_heads, self.head_dim)
        # q/k norms (Qwen3) and rotary fused with the KV-cache write: one kernel on CUDA
        qk_norm = (self.q_norm, self.k_norm) if self.qk_norm else None
        out = self.attn(q, k, v, positions, self.rotary, qk_norm)
        return self.o_proj(out.reshape(-1, self.num_heads * self.head_dim)), residual


class LlamaMLP(SwiGLUMLP):
    """The Llama-family MLP: sizes, bias and quantization from the config; ``prefix`` is its checkpoint name."""

    def __init__(self, config: PretrainedConfig, prefix: str = "mlp") -> None:
        super().__init__(config.hidden_size, config.intermediate_size, bool(getattr(config, "mlp_bias", False)),
                         parse_quant_config(config), prefix, parallel="column")


class LlamaDecoderLayer(nn.Module):
    """Pre-norm attention + MLP block with a residual stream carried between layers."""

    def __init__(self, config: PretrainedConfig, layer_idx: int, rotary: RotaryEmbedding,
                 attention_cls: type[LlamaAttention] = LlamaAttention) -> None:
        super().__init__()
        self.self_attn = attention_cls(config, layer_idx, rotary)
        self.mlp = self.make_mlp(config, layer_idx)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def make_mlp(self, config: PretrainedConfig, layer_idx: int) -> Any:
        """Layer ``layer_idx``'s feed-forward block (one with ``forward_prenorm``)."""
        return LlamaMLP(config, f"model.layers.{layer_idx}.mlp")

    def forward(self, positions: torch.Tensor, x: torch.Tensor, residual: torch.Tensor | None):
        # each norm is handed to the block after it, whose first kernel may compute it (decode GEMVs)
        x, residual = self.self_attn(positions, AddNorm(x, residual, self.input_layernorm))
        return self.mlp.forward_prenorm(AddNorm(x, residual, self.post_attention_layernorm))


class LlamaModel(nn.Module):
    """Embedding, decoder layers and final norm; ``make_layer(layer_idx, rotary)`` builds each layer (the
    hybrid models build theirs over the same stack, with a zero-centred final norm)."""

    def __init__(self, config: PretrainedConfig, max_position: int,
                 make_layer: Callable[[int, RotaryEmbedding], nn.Module], num_layers: int | None = None,
                 zero_centered_norm: bool = False) -> None:
        super().__init__()
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        self.rotary = RotaryEmbedding(config, head_dim, max_position)
        self.embed_tokens = VocabParallelEmbedding(config.vocab_size, config.hidden_size)
        count = config.num_hidden_layers if num_layers is None else num_layers
        self.layers = nn.ModuleList(make_layer(i, self.rotary) for i in range(count))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps, zero_centered=zero_centered_norm)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        x = self.embed_tokens(input_ids)
        residual = None
        for layer in self.layers:
            x, residual = layer(positions, x, residual)
        x, _ = self.norm(x, residual)
        return x


class LlamaForCausalLM(VocabParallelHead, nn.Module):
    """Causal LM head over :class:`LlamaModel`; ties the head to the embedding when the config says so."""

    attention_cls: type[LlamaAttention] = LlamaAttention  # the variants differ in their attention flags
    layer_cls: type[LlamaDecoderLayer] = LlamaDecoderLayer
    weight_loader_cls: type[WeightLoader] = WeightLoader
    supports_tensor_parallel = True  # attention split by heads, MLPs and experts by channels
    stacked_params = [
        (".q_proj.", ".qkv_proj.", 0), (".k_proj.", ".qkv_proj.", 1), (".v_proj.", ".qkv_proj.", 2),
        (".gate_proj.", ".gate_up_proj.", 0), (".up_proj.", ".gate_up_proj.", 1),
    ]

    def __init__(self, config: PretrainedConfig, max_position: int) -> None:
        super().__init__()
        self.config = config
        self.model = LlamaModel(config, max_position,
                                lambda i, rotary: self.layer_cls(config, i, rotary, self.attention_cls))
        self.init_lm_head(config)

    def kv_cache_shape(self) -> tuple[int, int, int]:
        """(attention layers, KV heads, head_dim): what the paged KV cache must hold."""
        attn: Any = self.model.layers[0].self_attn  # type: ignore[union-attr]
        return len(self.model.layers), attn.num_kv_heads, attn.head_dim

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Hidden states of every token: [num_tokens, hidden_size]."""
        return self.model(input_ids, positions)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Fill every parameter from HF-named tensors; raise naming anything missing or misshapen."""
        load_causal_lm(self, weights, self.stacked_params, self.weight_loader_cls)
