"""Mixture-of-experts feed-forward: softmax top-k router, SwiGLU experts, optional gated shared expert."""

from __future__ import annotations

import re

import torch
from torch import nn
from transformers import PretrainedConfig

from revolta_engine.layers.linear import Linear
from revolta_engine.layers.mlp import SwiGLUMLP
from revolta_engine.layers.norm import AddNorm
from revolta_engine.layers.quant import QuantConfig, parse_quant_config
from revolta_engine.layers.quant_moe import QuantizedExperts
from revolta_engine.parallel.communication import tp_all_reduce
from revolta_engine.parallel.sharding import narrow_features
from revolta_engine.parallel.state import get_tp_layout
from revolta_kernels import ops_moe

# decode batches up to this size take the fused path (native kernels read only the selected experts' weights)
MOE_FUSED_MAX_TOKENS = 256
# the residual add + RMSNorm before the block runs inside the router kernel on the fused and quantized-grouped paths
# up to this many tokens (every router block recomputes the norm of each token, one token after another: the MoE
# chain measured 2 us faster at batch 1 on an H200, but slower from batch 2 on)
MOE_ROUTER_NORM_MAX_TOKENS = 1
# checkpoint names of one expert's projections: ...experts.<e>.<gate_proj|up_proj|down_proj>.weight
EXPERT_TENSOR = re.compile(r"^(.*\.experts)\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$")


class FusedExperts(nn.Module):
    """All experts' weights as two stacked tensors: ``w13`` [E, 2I, H] (gate rows, then up) and ``w2`` [E, H, I].

    Checkpoints store either one tensor per expert and projection (``experts.<e>.gate_proj.weight``) or the
    stacked ``experts.gate_up_proj`` / ``experts.down_proj``; :meth:`load_expert` takes the former.
    """

    def __init__(self, num_experts: int, hidden: int, inter: int) -> None:
        super().__init__()
        self.num_experts = num_experts
        self.full_inter = inter
        # tensor parallelism: every rank holds every expert, over its slice of the intermediate channels
        self.inter_start, inter = get_tp_layout().split(inter, "moe_intermediate_size")
        self.inter = inter
        self.gate_up_proj = nn.Parameter(torch.empty(num_experts, 2 * inter, hidden), requires_grad=False)
        self.down_proj = nn.Parameter(torch.empty(num_experts, hidden, inter), requires_grad=False)

    def load_expert(self, expert: int, proj: str, tensor: torch.Tensor) -> str:
        """Copy one expert's projection; returns the parameter name it went to."""
        if not 0 <= expert < self.num_experts:
            raise ValueError(f"expert {expert} is outside 0..{self.num_experts - 1}")
        if proj == "down_proj":
            target, rows = self.down_proj.data[expert], slice(None)
        else:
            start = 0 if proj == "gate_proj" else self.inter
            target, rows = self.gate_up_proj.data[expert], slice(start, start + self.inter)
        part = target[rows]
        if self.inter != self.full_inter:  # this rank's channels: rows of gate/up, columns of down
            axis = 1 if proj == "down_proj" else 0
            tensor = narrow_features(tensor, axis, 1, self.inter_start, self.inter, proj)
        if tuple(tensor.shape) != tuple(part.shape):
            raise ValueError(f"expected shape {tuple(part.shape)}, got {tuple(tensor.shape)}")
        part.copy_(tensor)
        return "down_proj" if proj == "down_proj" else "gate_up_proj"

    def shard_checkpoint(self, param_name: str, tensor: torch.Tensor) -> torch.Tensor:
        """This rank's channels of a stacked checkpoint tensor (``gate_up_proj`` [E, 2I, H], ``down_proj`` [E, H, I])."""
        if self.inter == self.full_inter:
            return tensor
        if param_name == "down_proj":
            return narrow_features(tensor, 2, 1, self.inter_start, self.inter, param_name)
        halves = tensor.split(self.full_inter, dim=1)
        if len(halves) != 2:
            raise ValueError(f"expected {2 * self.full_inter} gate/up rows, got {tensor.shape[1]}")
        return torch.cat([narrow_features(h, 1, 1, self.inter_start, self.inter, param_name) for h in halves], dim=1)

    def forward(self, x: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        return ops_moe.fused_moe(x, self.gate_up_proj, self.down_proj, weights, ids)


def quantizes_experts(quant: QuantConfig, prefix: str) -> bool:
    """Whether the checkpoint quantizes the experts of the block at ``prefix`` (its rules may leave them dense)."""
    return quant.applies_to(f"{prefix}.experts.0.gate_proj")


class SparseMoeBlock(nn.Module):
    """Router ``gate`` + ``experts``; with ``shared_expert`` added under a sigmoid ``shared_expert_gate``."""

    def __init__(self, config: PretrainedConfig, *, renormalize: bool, shared_expert: bool, prefix: str = "mlp") -> None:
        """``prefix``: the block's checkpoint name (``model.layers.3.mlp``), for the quantization config's rules."""
        super().__init__()
        quant = parse_quant_config(config)
        hidden = config.hidden_size
        self.top_k = config.num_experts_per_tok
        self.renormalize = renormalize
        self.tp_size = get_tp_layout().size  # > 1: each rank's experts give part of the output, summed here
        self.gate = Linear(hidden, config.num_experts)
        self.experts: FusedExperts | QuantizedExperts = (
            QuantizedExperts(config.num_experts, hidden, config.moe_intermediate_size, quant, prefix)
            if quant is not None and quantizes_experts(quant, prefix)
            else FusedExperts(config.num_experts, hidden, config.moe_intermediate_size))
        self.shared_expert: SwiGLUMLP | None = None
        if shared_expert:
            # split like the experts, and summed with them: one all-reduce for the block
            self.shared_expert = SwiGLUMLP(hidden, config.shared_expert_intermediate_size,
                                           quant=quant, prefix=f"{prefix}.shared_expert",
                                           parallel="column", reduce_results=False)
            self.shared_expert_gate = Linear(hidden, 1)
            if isinstance(self.experts, QuantizedExperts):
                self.experts.stack_later = True  # with the shared expert: see finish_loading

    def finish_loading(self) -> None:
        """Quantized experts with a shared expert: stack them together (it becomes one more row per token in the
        grouped decode kernels) when its projections match the experts' and its gate is dense, as the decode path
        that uses it (:meth:`_quant_block`) needs; otherwise the experts alone."""
        if isinstance(self.experts, QuantizedExperts) and self.experts.stack_later:
            self.experts.stack(self.shared_expert if self._shared_gate_dense() else None)

    def _shared_gate_dense(self) -> bool:
        """Whether the shared expert's gate is a plain fp16 row (no quantization, no bias), which the fused and
        quantized decode kernels read themselves."""
        return self.shared_expert_gate.quant is None and self.shared_expert_gate.bias is None

    def _fused_ok(self, x: torch.Tensor) -> bool:
        """Few tokens on a GPU with dense weights: one op for routing, experts and shared expert (decode)."""
        if (not x.is_cuda or x.shape[0] > MOE_FUSED_MAX_TOKENS or self.gate.quant is not None
                or not isinstance(self.experts, FusedExperts)):
            return False
        shared = self.shared_expert
        return shared is None or (shared.gate_up_proj.quant is None and shared.down_proj.quant is None
                                  and shared.gate_up_proj.bias is None and shared.down_proj.bias is None
                                  and self._shared_gate_dense())

    def _quant_grouped_ok(self, x: torch.Tensor) -> bool:
        """Quantized experts on their grouped decode path, with a dense router (and shared expert gate): routing
        and the weighted sum then run as our ops too (:meth:`_quant_block`), no torch top-k or elementwise chain."""
        return (isinstance(self.experts, QuantizedExperts) and self.experts.runs_grouped(x, self.top_k)
                and self.gate.quant is None and self.gate.bias is None
                and (self.shared_expert is None or self._shared_gate_dense()))

    def forward_prenorm(self, inp: AddNorm) -> tuple[torch.Tensor, torch.Tensor]:
        """The block on ``norm(h)``, and ``h``: on the fused and quantized-grouped decode paths the residual add +
        norm runs inside the router kernel (``moe_router_norm``: no separate norm kernel), else through
        :meth:`AddNorm.run`. (Routing inside that kernel too, by its last block, measured slower than the routing
        launch: the last block waits for every router block, then runs alone.)"""
        if (inp.residual is not None and self.gate.bias is None
                and inp.x.shape[0] <= MOE_ROUTER_NORM_MAX_TOKENS and inp.norm.weight.dtype == inp.x.dtype):
            fused = self._fused_ok(inp.x)
            quant = not fused and self._quant_grouped_ok(inp.x)
            block = self._fused_block if fused else self._quant_block if quant else None
            if block is not None:
                logits, x, residual = ops_moe.moe_router_norm(inp.x, inp.residual, self.gate.weight,
                                                                 inp.norm.weight, inp.norm.eps, inp.norm.zero_centered)
                return self._summed(block(x, logits)), residual
        x, residual = inp.run()
        return self.forward(x), residual

    def _summed(self, out: torch.Tensor) -> torch.Tensor:
        return tp_all_reduce(out) if self.tp_size > 1 else out

    def _fused_block(self, x: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        shared = self.shared_expert
        return ops_moe.moe_block(
            x, logits, self.experts.gate_up_proj, self.experts.down_proj, self.top_k, self.renormalize,
            None if shared is None else shared.gate_up_proj.weight,
            None if shared is None else shared.down_proj.weight,
            None if shared is None else self.shared_expert_gate.weight)

    def _quant_block(self, x: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        """Routing, the quantized experts' rows and the weighted sum with the gated shared expert as ops over the
        whole batch (the same arithmetic as :meth:`forward`'s general path; no host sync)."""
        weights, ids = ops_moe.moe_topk_softmax(logits, self.top_k, self.renormalize)
        return self._quant_routed(x, weights, ids)

    def _quant_routed(self, x: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """The quantized experts' rows of each token's chosen experts and their weighted sum, with the gated
        shared expert (:meth:`_quant_block` after the routing)."""
        assert isinstance(self.experts, QuantizedExperts)
        if self.shared_expert is None:
            return self.experts.combined(x, weights, ids)
        if self.experts.shared_id >= 0:  # the shared expert is each token's last row of the experts' kernels
            return self.experts.combined(x, weights, ids, self.shared_expert_gate.weight)
        return ops_moe.moe_combine(self.experts.routed_rows(x, ids), weights, self.shared_expert(x), x,
                                      self.shared_expert_gate.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._fused_ok(x):
            # the router GEMV as our kernel: its weight stream starts before the previous kernel ends (PDL)
            logits = ops_moe.moe_router(x, self.gate.weight) if self.gate.bias is None else self.gate(x)
            return self._summed(self._fused_block(x, logits))
        if self._quant_grouped_ok(x):
            return self._summed(self._quant_block(x, ops_moe.moe_router(x, self.gate.weight)))
        weights, ids = ops_moe.moe_topk_softmax(self.gate(x), self.top_k, self.renormalize)
        # transformers casts the routing weights to the activations' dtype before weighting
        out = self.experts(x, weights.to(x.dtype), ids)
        if self.shared_expert is not None:
            out = out + torch.sigmoid(self.shared_expert_gate(x)) * self.shared_expert(x)
        return self._summed(out)
