"""The hybrid decoder shared by Qwen3-Next and Qwen3.5: Gated DeltaNet and gated full-attention layers.

``config.layer_types`` says which layer is which. Attention layers use the paged KV cache (indexed among
attention layers only); Gated DeltaNet layers use the per-request state pool (indexed among themselves).
Norms are zero-centred RMSNorms (``x_hat * (1 + w)``); attention has q/k norms, partial rotary and a
sigmoid output gate taken from the second half of each head's ``q_proj`` output.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch import nn
from transformers import PretrainedConfig

from revolta_engine.layers.attention import PagedAttention
from revolta_engine.layers.gated_deltanet import GatedDeltaNet
from revolta_engine.layers.linear import Linear, MergedLinear
from revolta_engine.layers.mlp import SwiGLUMLP
from revolta_engine.layers.moe import SparseMoeBlock
from revolta_engine.layers.norm import AddNorm, RMSNorm
from revolta_engine.layers.quant import QuantConfig, make_linear_method, parse_quant_config
from revolta_engine.layers.rotary import RotaryEmbedding
from revolta_engine.layers.vocab_parallel import VocabParallelHead
from revolta_engine.models.llama import LlamaModel, attention_head_slices
from revolta_engine.models.moe_weights import MoeWeightLoader
from revolta_engine.models.weights import load_causal_lm
from revolta_engine.worker.state_cache import StateCacheSpec
from revolta_kernels import ops

LINEAR, FULL = "linear_attention", "full_attention"


class GatedAttention(nn.Module):
    """Full attention with zero-centred q/k norms, partial rotary and a sigmoid gate on the output."""

    def __init__(self, config: PretrainedConfig, attn_idx: int, rotary: RotaryEmbedding,
                 quant: QuantConfig | None = None, name: str = "self_attn") -> None:
        super().__init__()
        total_heads, total_kv = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // total_heads
        # this rank's heads; each head's q is followed by its gate in the projection
        self.num_heads, self.num_kv_heads, slices = attention_head_slices(total_heads, total_kv, self.head_dim, 2)
        bias = bool(getattr(config, "attention_bias", False))
        q2, kv = 2 * total_heads * self.head_dim, total_kv * self.head_dim
        self.qkv_proj = MergedLinear(config.hidden_size, [q2, kv, kv], bias=bias, quant=make_linear_method(
            quant, f"{name}.qkv_proj", tuple(f"{name}.{p}_proj" for p in "qkv")), parallel="column",
            part_slices=slices)
        self.o_proj = Linear(total_heads * self.head_dim, config.hidden_size, bias=bias,
                             quant=make_linear_method(quant, f"{name}.o_proj"), parallel="row")
        self.q_norm = RMSNorm(self.head_dim, config.rms_norm_eps, zero_centered=True)
        self.k_norm = RMSNorm(self.head_dim, config.rms_norm_eps, zero_centered=True)
        self.rotary = rotary
        self.attn = PagedAttention(self.num_heads, self.num_kv_heads, self.head_dim, self.head_dim**-0.5, attn_idx)

    def forward(self, positions: torch.Tensor, inp: AddNorm) -> tuple[torch.Tensor, torch.Tensor]:
        """Attention of ``norm(h)`` (norm fused into the q/k/v projection where it can be), and ``h``."""
        qkv, residual = self.qkv_proj.forward_prenorm(inp)
        n = qkv.shape[0]
        qg, k, v = self.qkv_proj.split(qkv)
        q, gate = qg.reshape(n, self.num_heads, 2 * self.head_dim).chunk(2, dim=-1)
        k = k.reshape(n, self.num_kv_heads, self.head_dim)
        v = v.reshape(n, self.num_kv_heads, self.head_dim)
        # q/k norms, partial rotary and the KV-cache write in one op (one kernel on CUDA) on the strided views;
        # the gate stays a strided view too (its reshape to [n, -1] would be one more copy kernel per layer)
        out = self.attn(q, k, v, positions, self.rotary, (self.q_norm, self.k_norm))
        return self.o_proj(ops.sigmoid_gate_mul(out.reshape(n, -1), gate)), residual  # gate: one kernel on CUDA


class HybridDecoderLayer(nn.Module):
    """Pre-norm mixer (Gated DeltaNet or attention) + feed-forward, with the residual carried along."""

    def __init__(self, config: PretrainedConfig, layer_type: str, mixer_idx: int, rotary: RotaryEmbedding,
                 mlp: SwiGLUMLP | SparseMoeBlock, quant: QuantConfig | None = None, name: str = "model.layers.0"
                 ) -> None:
        super().__init__()
        self.is_linear = layer_type == LINEAR
        if self.is_linear:
            self.linear_attn = GatedDeltaNet(config, mixer_idx, quant, f"{name}.linear_attn")
        else:
            self.self_attn = GatedAttention(config, mixer_idx, rotary, quant, f"{name}.self_attn")
        self.mlp = mlp
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps, zero_centered=True)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps, zero_centered=True)

    def forward(self, positions: torch.Tensor, x: torch.Tensor, residual: torch.Tensor | None):
        # each norm is handed to the block after it, whose first kernel may compute it (decode GEMVs, router)
        pre = AddNorm(x, residual, self.input_layernorm)
        if self.is_linear:
            x, residual = self.linear_attn(pre)
        else:
            x, residual = self.self_attn(positions, pre)
        return self.mlp.forward_prenorm(AddNorm(x, residual, self.post_attention_layernorm))


class HybridModel(LlamaModel):
    """Embedding, hybrid layers, final zero-centred norm. ``make_mlp(config, layer_idx)`` picks each MLP;
    ``quant`` is the checkpoint's quantization and ``prefix`` the checkpoint's name of the layers' parent."""

    def __init__(self, config: PretrainedConfig, max_position: int, make_mlp, quant: QuantConfig | None = None,
                 prefix: str = "model") -> None:
        types = list(config.layer_types)
        if any(t not in (LINEAR, FULL) for t in types):
            raise ValueError(f"unsupported layer types {sorted(set(types) - {LINEAR, FULL})}")
        types = types[: config.num_hidden_layers]

        def make_layer(i: int, rotary: RotaryEmbedding) -> HybridDecoderLayer:
            return HybridDecoderLayer(config, types[i], types[:i].count(types[i]), rotary, make_mlp(config, i), quant,
                                      f"{prefix}.layers.{i}")

        super().__init__(config, max_position, make_layer, len(types), zero_centered_norm=True)


class HybridForCausalLM(VocabParallelHead, nn.Module):
    """LM head over :class:`HybridModel`; subclasses give ``make_mlp`` and the checkpoint renames.

    A quantized checkpoint's Gated DeltaNet layers hold two input projections, ``in_proj`` (q/k/v and z,
    quantized) and ``in_proj_ba`` (b and a, kept in fp16 by the quantizers), instead of one merged ``in_proj``.
    """

    supports_tensor_parallel = True  # mixers split by heads, MLPs and experts by channels
    stacked_params = [
        (".q_proj.", ".qkv_proj.", 0), (".k_proj.", ".qkv_proj.", 1), (".v_proj.", ".qkv_proj.", 2),
        (".gate_proj.", ".gate_up_proj.", 0), (".up_proj.", ".gate_up_proj.", 1),
        (".in_proj_qkv.", ".in_proj.", 0), (".in_proj_z.", ".in_proj.", 1),
        (".in_proj_b.", ".in_proj.", 2), (".in_proj_a.", ".in_proj.", 3),
    ]

    def __init__(self, config: PretrainedConfig, max_position: int, checkpoint_prefix: str = "model") -> None:
        """``checkpoint_prefix``: where the checkpoint keeps the decoder (``model.language_model`` in the multimodal
        Qwen3.5 checkpoints); the quantization config's per-module rules name modules under it."""
        super().__init__()
        self.config = config
        self.quant_config = parse_quant_config(config)
        self.checkpoint_prefix = checkpoint_prefix
        if self.quant_config is not None:  # b and a load into their own fp16 projection
            ba = {".in_proj_b.": 0, ".in_proj_a.": 1}
            self.stacked_params = [(old, ".in_proj_ba.", ba[old]) if old in ba else (old, new, i)
                                   for old, new, i in type(self).stacked_params]
        self.model = HybridModel(config, max_position, self.make_mlp, self.quant_config, self.checkpoint_prefix)
        self.init_lm_head(config)

    def make_mlp(self, config: PretrainedConfig, layer_idx: int) -> nn.Module:
        raise NotImplementedError

    def mlp_name(self, layer_idx: int) -> str:
        """The checkpoint's name of layer ``layer_idx``'s feed-forward block."""
        return f"{self.checkpoint_prefix}.layers.{layer_idx}.mlp"

    def _layers(self, linear: bool) -> list[Any]:
        return [layer for layer in self.model.layers if layer.is_linear == linear]  # type: ignore[union-attr]

    def kv_cache_shape(self) -> tuple[int, int, int]:
        """(attention layers, KV heads, head_dim): only the full-attention layers use the paged KV cache."""
        attn = self._layers(False)
        if not attn:
            raise ValueError("hybrid models without any full-attention layer are not supported")
        return len(attn), attn[0].self_attn.num_kv_heads, attn[0].self_attn.head_dim

    def state_cache_spec(self) -> StateCacheSpec:
        """Shape of one request's recurrent state across the Gated DeltaNet layers."""
        layers = self._layers(True)
        gdn: GatedDeltaNet = layers[0].linear_attn
        return StateCacheSpec(len(layers), gdn.conv_dim, gdn.conv_kernel - 1, gdn.num_v_heads, gdn.head_k_dim,
                              gdn.head_v_dim, self.model.embed_tokens.weight.dtype)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Hidden states of every token: [num_tokens, hidden_size]."""
        return self.model(input_ids, positions)

    def rename(self, weights: Iterable[tuple[str, torch.Tensor]]) -> Iterator[tuple[str, torch.Tensor]]:
        """Checkpoint names -> ours (subclasses split fused tensors here)."""
        yield from weights

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Fill every parameter from HF-named tensors; raise naming anything missing or misshapen."""
        load_causal_lm(self, self.rename(weights), self.stacked_params, MoeWeightLoader)
