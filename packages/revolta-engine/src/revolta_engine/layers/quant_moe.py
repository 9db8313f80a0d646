"""Quantized mixture-of-experts experts (AWQ / GPTQ checkpoints that quantize the experts, such as
Qwen3-30B-A3B-AWQ): one quantized SwiGLU MLP per expert.

Every expert is an ordinary :class:`~revolta_engine.layers.mlp.SwiGLUMLP` over quantized linear layers, so its
checkpoint tensors (``experts.<e>.gate_proj.qweight`` ...) load, repack (AWQ interleaving, GPTQ act-order) and split
over tensor-parallel ranks exactly as a dense model's MLP does. The experts stay packed in memory: what makes a
quantized MoE model fit is the 4-bit experts.

Once loaded, the experts' packed tensors are stacked (``[E, ...]``; each expert's parameters become views of the
stacks, so nothing is held twice). On a GPU, a step of at most ``GROUPED_MAX_TOKENS`` tokens with few routed rows per
expert (decode) then runs every routed (token, slot) row in two ops, gate/up (``revolta::quant_moe_matmul``) and
SiLU-and-mul + down + the weighted sum (``revolta::quant_moe_down_combine``), whose kernels read the router's choice
on the device: no host sync, so the decode step is captured in a CUDA graph.
Larger steps (prefill, and decode steps with at least ``SORTED_MIN_ROWS_PER_EXPERT`` routed rows per expert) on a
GPU sort the routed rows by expert and run each projection as one tensor-core GEMM over every expert
(``revolta::quant_moe_gemm``, no host sync, so such decode steps are captured in CUDA graphs too). The CPU, and experts
that cannot be stacked (GPTQ act-order gathers each gate/up projection's input), run one MLP per expert that got
tokens, picked on the host.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

import revolta_kernels
from revolta_engine.layers.mlp import SwiGLUMLP
from revolta_engine.layers.quant import QuantConfig
from revolta_kernels import ops_moe, ops_quant

GROUPED_MAX_TOKENS = 256  # as the dense experts' fused decode kernels (layers/moe.py MOE_FUSED_MAX_TOKENS)
# a decode step whose routed rows average at least this many per expert takes the sorted GEMM (it reads each expert's
# weights once per row tile, the grouped kernels once per row): with the short tile and the sort below it measured
# 1.11x / 1.18x faster than the grouped kernels at 2 rows per expert (Qwen3-30B-A3B at 32 tokens / Qwen3.5-35B-A3B
# at 64) and 0.81x / 0.76x at 1 on an H100 (`benchmarks/quant_moe_bench.py crossover`); 64 concurrent Qwen3.5-35B-A3B
# requests gave 1987.9 output tok/s at 2 against 1615.3 at 4
SORTED_MIN_ROWS_PER_EXPERT = 2.0


@dataclass(frozen=True)
class StackedProjection:
    """One projection of every expert, stacked: ``qweight [E, K / pack, N]``, ``scales [E, K / G, N]``,
    ``qzeros [E, K / G, N / pack]`` in the kernel layout, with the settings to read them."""

    qweight: torch.Tensor
    scales: torch.Tensor
    qzeros: torch.Tensor
    bits: int
    group_size: int
    zero_offset: int

    def apply(self, x: torch.Tensor, ids: torch.Tensor, act: int, shared_id: int = -1) -> torch.Tensor:
        """``revolta::quant_moe_matmul`` of the rows routed by ``ids`` (act 1: SiLU-and-mul of ``x`` first), and of
        one more row per token for expert ``shared_id`` when it is >= 0."""
        return ops_quant.quant_moe_matmul(x.contiguous(), self.qweight, self.scales, self.qzeros, ids.contiguous(),
                                          self.bits, self.group_size, self.zero_offset, act, shared_id)


def can_stack(layers: list[Any]) -> bool:
    """Whether the quantized layers can share one kernel call: no bias, no input gather (act-order), the same
    settings and shapes."""
    if any(getattr(m, "quant", None) is None or getattr(m, "qweight", None) is None for m in layers):
        return False
    settings = {(type(m.quant), m.quant.bits, m.group_size, m.quant.config.zero_offset, m.qweight.shape,
                 m.scales.dtype) for m in layers}
    return len(settings) == 1 and not any(m.bias is not None or m.act_perm is not None for m in layers)


def stack_projection(layers: list[Any]) -> StackedProjection:
    """The layers' packed tensors stacked, each layer's parameters turned into views of the stacks (the layers must
    pass :func:`can_stack`)."""
    first = layers[0]
    stacks = {name: torch.stack([getattr(m, name).data for m in layers]) for name in ("qweight", "scales", "qzeros")}
    for e, m in enumerate(layers):
        for name, stack in stacks.items():
            getattr(m, name).data = stack[e]
    return StackedProjection(stacks["qweight"], stacks["scales"], stacks["qzeros"], first.quant.bits,
                             first.group_size, first.quant.config.zero_offset)


class QuantizedExperts(nn.ModuleList):
    """``num_experts`` quantized SwiGLU MLPs; item ``e`` is ``<prefix>.experts.<e>``, as the checkpoint names it."""

    def __init__(self, num_experts: int, hidden: int, inter: int, quant: QuantConfig, prefix: str) -> None:
        # tensor parallelism: each expert's intermediate channels are split over the ranks (its output is this
        # rank's part of the sum, reduced once for the whole block)
        super().__init__(SwiGLUMLP(hidden, inter, quant=quant, prefix=f"{prefix}.experts.{e}", parallel="column",
                                   reduce_results=False) for e in range(num_experts))
        self.stacked: tuple[StackedProjection, StackedProjection] | None = None  # (gate/up, down) once loaded
        self.shared_id = -1  # the index of a shared expert stacked after the experts (see stack); -1: none
        self.stack_later = False  # set by a block that stacks these experts with its shared expert

    def finish_loading(self) -> None:
        """Stack the loaded experts for the grouped decode path (after each expert's own ``finish_loading``),
        unless the block holding them does it (:attr:`stack_later`)."""
        if not self.stack_later:
            self.stack()

    def stack(self, shared: SwiGLUMLP | None = None) -> None:
        """Stack the experts' packed tensors, and ``shared`` after them (index :attr:`shared_id`) when its
        projections match theirs: the grouped kernels then run it as one more row per token, in the same launches.
        Nothing is stacked when the experts cannot share a kernel call (act-order, differing settings)."""
        mlps = list(self)
        gate_ups, downs = [m.gate_up_proj for m in mlps], [m.down_proj for m in mlps]
        if not (can_stack(gate_ups) and can_stack(downs)):
            return
        fold = (shared is not None and can_stack([*gate_ups, shared.gate_up_proj])
                and can_stack([*downs, shared.down_proj]))
        if fold:
            assert shared is not None
            gate_ups.append(shared.gate_up_proj)
            downs.append(shared.down_proj)
        self.stacked = (stack_projection(gate_ups), stack_projection(downs))
        self.shared_id = len(mlps) if fold else -1

    @property
    def can_run_grouped(self) -> bool:
        """Whether decode steps take the graph-capturable grouped path (the experts are stacked)."""
        return self.stacked is not None

    def _stacked_kernels(self, x: torch.Tensor) -> bool:
        """Whether ``x`` can go through the stacked experts' kernels (the grouped or the sorted path)."""
        return self.can_run_grouped and x.is_cuda and revolta_kernels.native_available()

    def _sorted_step(self, x: torch.Tensor, top_k: int) -> bool:
        """Whether a step of ``x`` routed to ``top_k`` experts per token is for the sorted GEMM: past the grouped
        kernels' limit, or with enough rows per expert."""
        return x.shape[0] > GROUPED_MAX_TOKENS or x.shape[0] * top_k >= SORTED_MIN_ROWS_PER_EXPERT * len(self)

    def runs_sorted(self, x: torch.Tensor, top_k: int) -> bool:
        """Whether ``forward`` takes the sorted-rows GEMM path (graph-capturable too) for ``x`` routed to ``top_k``
        experts per token: on a GPU, steps past the grouped kernels' limit or with enough rows per expert."""
        return self._stacked_kernels(x) and self._sorted_step(x, top_k)

    def runs_grouped(self, x: torch.Tensor, top_k: int) -> bool:
        """Whether ``forward`` takes the graph-capturable grouped path for ``x`` routed to ``top_k`` experts per
        token (decode steps with few rows per expert)."""
        return (self._stacked_kernels(x) and x.shape[0] <= GROUPED_MAX_TOKENS
                and not self._sorted_step(x, top_k))

    def forward(self, x: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        """``sum_k weights[t, k] * expert[ids[t, k]](x[t])`` for each token ``t`` (``weights`` in ``x``'s dtype)."""
        if self.runs_grouped(x, ids.shape[1]):
            return self.grouped(x, weights, ids)
        if self.runs_sorted(x, ids.shape[1]):
            return self.sorted_gemm(x, weights, ids)
        # rows sorted by expert, so each expert's rows are one slice; one host sync (the counts) for the layer
        flat = ids.reshape(-1)
        order = torch.argsort(flat, stable=True)
        tokens = order // ids.shape[1]
        rows, row_weights = x[tokens], weights.reshape(-1)[order].unsqueeze(-1)
        counts = torch.bincount(flat, minlength=len(self)).tolist()
        parts, start = [], 0
        for expert, count in enumerate(counts):
            if count:
                parts.append(self[expert](rows[start:start + count]) * row_weights[start:start + count])
                start += count
        out = torch.zeros_like(x)
        return out.index_add_(0, tokens, torch.cat(parts)) if parts else out

    def _stacks(self) -> tuple[StackedProjection, StackedProjection]:
        """The stacked (gate/up, down) projections that the grouped paths read."""
        if self.stacked is None:
            raise RuntimeError("the experts are not stacked (act-order or mixed settings): use forward")
        return self.stacked

    def sorted_gemm(self, x: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """``forward`` for many tokens with no host sync: the routed rows sorted by expert, each projection one
        ``revolta::quant_moe_gemm`` over the stacks, then each token's rows weighted and summed in float32
        (``revolta::moe_combine``, in a fixed order). The gate/up GEMM gathers each sorted row's token from ``x`` and
        writes SiLU-and-mul of its rows, the down GEMM writes its results back in routed order, so no pass over the
        rows runs around them."""
        gate_up, down = self._stacks()
        experts = gate_up.qweight.shape[0]
        tokens, top_k = ids.shape
        # 16-bit keys where the ids fit: the radix sort makes two passes over them instead of eight over int64
        # (measured 30 us against 80 us at 8192 rows on an H100)
        key_type = torch.int16 if experts < 2**15 else torch.int32
        sorted_ids, order = torch.sort(ids.reshape(-1).to(key_type), stable=True)
        # expert e's rows start at the first sorted id >= e (searchsorted: no host sync, unlike bincount's CUDA
        # kernel, which reads the largest id back); ids past the stacks (none from the router) sort last, outside
        # every expert's rows, so the GEMMs give them zeros
        edges = torch.arange(experts + 1, device=x.device, dtype=key_type)
        offsets = torch.searchsorted(sorted_ids, edges)
        h = ops_quant.quant_moe_gemm(x, offsets, gate_up.qweight, gate_up.scales, gate_up.qzeros, gate_up.bits,
                                     gate_up.group_size, gate_up.zero_offset, x_rows=order, x_row_div=top_k,
                                     silu=True)
        y = ops_quant.quant_moe_gemm(h, offsets, down.qweight, down.scales, down.qzeros, down.bits, down.group_size,
                                     down.zero_offset, out_rows=order)
        return ops_moe.moe_combine(y.view(tokens, top_k, -1), weights.float(), None, None, None)

    def routed_rows(self, x: torch.Tensor, ids: torch.Tensor, with_shared: bool = False) -> torch.Tensor:
        """Each routed (token, slot) row's expert output, ``[T, top_k, hidden]``: two ops, gate/up and SiLU-and-mul
        + down (needs the stacks: see :meth:`finish_loading`). ``with_shared`` (needs :attr:`shared_id` >= 0): the
        stacked shared expert's output as one more row per token, ``[T, top_k + 1, hidden]``."""
        gate_up, down = self._stacks()
        if with_shared and self.shared_id < 0:
            raise RuntimeError("no shared expert is stacked with these experts")
        shared_id = self.shared_id if with_shared else -1
        return down.apply(gate_up.apply(x, ids, 0, shared_id), ids, 1, shared_id)

    def grouped(self, x: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """``forward`` through :meth:`combined`, the slots weighted and summed in float32."""
        return self.combined(x, weights.float(), ids)

    def combined(self, x: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor,
                 shared_gate: torch.Tensor | None = None) -> torch.Tensor:
        """``sum_k weights[t, k] * expert[ids[t, k]](x[t])`` (``weights`` float32) in two ops: gate/up, then
        SiLU-and-mul + down + the weighted sum (``revolta::quant_moe_down_combine``: one kernel for one token, else
        two).
        ``shared_gate`` (needs :attr:`shared_id` >= 0): the stacked shared expert's row is added, gated by
        ``sigmoid(x @ shared_gate)``."""
        gate_up, down = self._stacks()
        if shared_gate is not None and self.shared_id < 0:
            raise RuntimeError("no shared expert is stacked with these experts")
        shared_id = self.shared_id if shared_gate is not None else -1
        h = gate_up.apply(x, ids, 0, shared_id)
        return ops_quant.quant_moe_down_combine(h, down.qweight, down.scales, down.qzeros, ids.contiguous(),
                                                weights.contiguous(), down.bits, down.group_size, down.zero_offset,
                                                shared_id, x.contiguous() if shared_gate is not None else None,
                                                shared_gate)
