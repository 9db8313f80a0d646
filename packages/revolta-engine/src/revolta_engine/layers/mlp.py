"""The SwiGLU feed-forward block (Llama-family MLPs, the hybrid models' dense MLPs and MoE shared experts)."""

from __future__ import annotations

import torch
from torch import nn

from revolta_engine.layers.activation import SiluAndMul
from revolta_engine.layers.linear import Linear, MergedLinear
from revolta_engine.layers.norm import AddNorm
from revolta_engine.layers.quant import QuantConfig, make_linear_method


class SwiGLUMLP(nn.Module):
    """``down(silu(gate(x)) * up(x))`` with gate/up merged into one projection.

    ``quant``: the checkpoint's quantization; ``prefix`` is the block's checkpoint name (``model.layers.3.mlp``),
    which the per-module rules of the quantization config are matched against. ``parallel="column"``: tensor
    parallelism splits the intermediate channels over the ranks (gate/up column-, down row-parallel; with
    ``reduce_results`` False the output is this rank's part of the sum).
    """

    def __init__(self, hidden: int, inter: int, bias: bool = False, quant: QuantConfig | None = None,
                 prefix: str = "mlp", parallel: str = "none", reduce_results: bool = True) -> None:
        super().__init__()
        self.gate_up_proj = MergedLinear(
            hidden, [inter, inter], bias=bias,
            quant=make_linear_method(quant, f"{prefix}.gate_up_proj", (f"{prefix}.gate_proj", f"{prefix}.up_proj")),
            parallel=parallel)
        self.down_proj = Linear(inter, hidden, bias=bias, quant=make_linear_method(quant, f"{prefix}.down_proj"),
                                parallel="row" if parallel == "column" else "none", reduce_results=reduce_results)
        self.act = SiluAndMul()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._down(self.gate_up_proj(x))

    def finish_loading(self) -> None:
        """An act-order down projection's input order folded into gate/up's output columns (the same order for
        both halves: SiLU-and-mul is elementwise), so the down projection neither gathers nor loses its fused
        SiLU-and-mul kernel. After an act-order gate/up it keeps the act-order kernel's code, which is faster there
        (:meth:`QuantLinearMethod.apply_silu`)."""
        quant = self.down_proj.quant
        gathers = getattr(self.gate_up_proj, "act_perm", None) is not None
        order = quant.take_input_order(self.down_proj, gathers) if quant is not None else None
        if order is not None:
            inter = self.down_proj.in_features
            self.gate_up_proj.permute_outputs(torch.cat([order, order + inter]))

    def forward_prenorm(self, inp: AddNorm) -> tuple[torch.Tensor, torch.Tensor]:
        """The MLP of ``norm(h)`` (norm fused into gate/up where it can be), and ``h``."""
        y, residual = self.gate_up_proj.forward_prenorm(inp)
        return self._down(y), residual

    def _down(self, y: torch.Tensor) -> torch.Tensor:
        if self.down_proj.fuses_silu(y):  # decode on CUDA: SiLU-and-mul inside the down projection's kernel
            return self.down_proj.forward_silu(y)
        return self.down_proj(self.act(y))
