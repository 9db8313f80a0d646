"""The multi-token-prediction (MTP) head of Qwen3-Next and Qwen3.5 checkpoints (``mtp.*`` tensors).

For the entry at position ``p`` the head takes the token at ``p + 1`` and the target model's final (normed)
hidden state at ``p``: both are RMS-normed, concatenated (embedding first) and projected back to the hidden size
by ``fc``; one full-attention decoder layer of the target's kind (its own paged KV cache, rotary at ``p``) and a
final norm follow, and the target's LM head turns the result into logits for the token at ``p + 2``. Its output
hidden state stands in for the target's at ``p + 1`` when the head proposes one more token after that.

The embedding and LM head are the target model's (not parameters of this module, and not in ``mtp.*``).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn
from transformers import PretrainedConfig

from revolta_engine.layers.linear import Linear
from revolta_engine.layers.mlp import SwiGLUMLP
from revolta_engine.layers.moe import SparseMoeBlock
from revolta_engine.layers.norm import RMSNorm
from revolta_engine.layers.quant import parse_quant_config
from revolta_engine.layers.rotary import RotaryEmbedding
from revolta_engine.models.hybrid import FULL, HybridDecoderLayer, HybridForCausalLM
from revolta_engine.models.moe_weights import MoeWeightLoader

PREFIX = "mtp."


def mtp_layer_count(tensor_names: Iterable[str]) -> int:
    """How many MTP layers the checkpoint holds (0: none), counted from its tensors (configs name the count
    ``num_nextn_predict_layers`` or ``mtp_num_hidden_layers``, or not at all)."""
    layers = {name.split(".")[2] for name in tensor_names if name.startswith(PREFIX + "layers.")}
    return len(layers)


class HybridMTP(nn.Module):
    """One MTP layer over a :class:`HybridForCausalLM` target; set :attr:`target_hidden` before each call.

    ``quantized``: whether the head's projections are stored quantized. Quantized checkpoints differ here (some
    quantizers leave the head in 16 bits, some quantize it with the rest), so the tensors decide, not the config.
    """

    def __init__(self, config: PretrainedConfig, max_position: int, moe: bool, quantized: bool = False) -> None:
        super().__init__()
        if not quantized and getattr(config, "quantization_config", None):
            config = copy.copy(config)
            config.quantization_config = None  # its layers (shared expert included) are built in 16 bits
        h, eps = config.hidden_size, config.rms_norm_eps
        self.hidden_size = int(h)
        head_dim = getattr(config, "head_dim", None) or h // config.num_attention_heads
        quant = parse_quant_config(config)
        # fc sees the two normed halves; checkpoints keep it unquantized (the quantizers skip the head's input)
        self.fc = Linear(2 * h, h)
        self.pre_fc_norm_embedding = RMSNorm(h, eps, zero_centered=True)
        self.pre_fc_norm_hidden = RMSNorm(h, eps, zero_centered=True)
        mlp: nn.Module
        if moe:
            mlp = SparseMoeBlock(config, renormalize=bool(getattr(config, "norm_topk_prob", True)),
                                 shared_expert=True, prefix="mtp.layers.0.mlp")
        else:
            mlp = SwiGLUMLP(h, config.intermediate_size, quant=quant, prefix="mtp.layers.0.mlp")
        rotary = RotaryEmbedding(config, head_dim, max_position)
        self.layers = nn.ModuleList([HybridDecoderLayer(config, FULL, 0, rotary, mlp, quant, "mtp.layers.0")])
        self.norm = RMSNorm(h, eps, zero_centered=True)
        self._target: list[HybridForCausalLM] = []  # a list, so its parameters are not this module's
        self.target_hidden: torch.Tensor | None = None

    def attach(self, target: HybridForCausalLM) -> None:
        """Share the target's embedding and LM head."""
        self._target[:] = [target]

    def kv_cache_shape(self) -> tuple[int, int, int]:
        """(layers, KV heads, head_dim) of the head's own paged KV cache."""
        attn: Any = self.layers[0].self_attn
        return 1, int(attn.num_kv_heads), int(attn.head_dim)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """The head's normed output for each entry (token ``input_ids`` at ``positions + 1``, hidden state
        :attr:`target_hidden` at ``positions``)."""
        assert self.target_hidden is not None and self._target, "attach() and set target_hidden first"
        embeds = self.pre_fc_norm_embedding(self._target[0].model.embed_tokens(input_ids))
        hidden = self.pre_fc_norm_hidden(self.target_hidden.to(embeds.dtype))
        x = self.fc(torch.cat([embeds, hidden], dim=-1))
        x, residual = self.layers[0](positions, x, None)
        out, _ = self.norm(x, residual)
        return out

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The target's LM head."""
        return self._target[0].compute_logits(hidden)

    def load_weights(self, tensors: dict[str, torch.Tensor], stacked: Any) -> None:
        """Fill every parameter from the checkpoint's ``mtp.layers.0.*`` / ``mtp.fc`` ... tensors."""
        def renamed():
            for name, tensor in tensors.items():
                if name.startswith(PREFIX + "layers.") and name.split(".")[2] != "0":
                    continue  # further MTP layers: this engine chains the first one
                yield name.removeprefix(PREFIX), tensor

        MoeWeightLoader(self, stacked, lambda name: "rotary_emb.inv_freq" in name).load(renamed())
