"""Linear layers. Weights are stored ``[out_features, in_features]`` like torch and HF.

On CUDA, calls of at most ``DENSE_GEMV_MAX_M`` rows (decode) on fp16 weights without bias run revolta-kernels'
skinny fp16 GEMV (``revolta::dense_linear``: PDL launch, weight stream issued before the wait on the previous
kernel) instead of cuBLAS; larger calls keep cuBLAS. The rule comes from the H200 (CUDA graphs, cold weights): at
M=1 the GEMV beat cuBLAS on all four Llama-8B projections (qkv 13.7 vs 15.9 us, o 9.1 vs 13.7, gate_up 53.6 vs
61.4, down 28.0 vs 32.2), at M=2 on three of four, at M=4 on one, at M=8 on none (it is issue-bound there), so
the threshold is 2. The quantized MLP's down projection takes the gate_up output directly
(:meth:`Linear.forward_silu`: SiLU-and-mul fused into the skinny int4/int8 kernel's activation staging) at M <= 8.
The fp16 down projection keeps the separate silu_and_mul kernel: every block of the dense GEMV would recompute
the activation of the whole K, which measured slower (33.2 us) than the separate kernel plus the GEMV (~29 us).
A pre-norm block's first projection (:meth:`Linear.forward_prenorm`: Llama's qkv and gate_up, the hybrid models'
GDN in_proj, attention qkv and dense MLP gate_up) can also compute the residual add + RMSNorm in front of it
(``revolta::dense_linear_add_rms_norm``), so no separate norm kernel runs. For fp16 weights that is taken at one
row: on the H200 (chained calls, CUDA graphs, PDL) the fused kernel (4 warps x 4 rows) took 14.0 / 56.8 / 14.8 /
11.3 us at M=1 on 6144x4096 / 28672x4096 / 12352x2048 / 9216x2048 against 17.5 / 58.0 / 17.3 / 14.0 us for the
norm kernel + GEMV; at M=2 it lost or tied. End to end it took Llama-3.1-8B fp16 batch-1 decode from 235.5 to
242.2 tok/s and Qwen3.5-35B-A3B from 366.1 to 378.6 tok/s. Its normed activation is not rounded to fp16 before
the products (one pass), so it is within the GEMV's tolerance of the unfused path, not bit-equal to it.
A quantized q/k/v projection can also take rotary and the KV-cache write into its epilogue
(:meth:`Linear.forward_prenorm_rope`, ``revolta::quant_qkv_rope_cache``: int4 group 128, at most 2 tokens, fp16
cache), so no rotary kernel runs between it and the attention.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from revolta_engine.parallel.communication import tp_all_reduce
from revolta_engine.parallel.sharding import FeatureAxes, narrow_features
from revolta_engine.parallel.state import get_tp_layout
from revolta_kernels import ops, ops_quant

if TYPE_CHECKING:
    from revolta_engine.layers.norm import AddNorm
    from revolta_engine.layers.quant import QuantLinearMethod
    from revolta_engine.layers.rotary import RopeCache

SKINNY_MAX_M = ops_quant.SKINNY_MAX_M


def _rows(x: torch.Tensor) -> int:
    return x.numel() // x.shape[-1] if x.shape[-1] else 0


DENSE_GEMV_MAX_M = 2  # rows up to which fp16 calls take the skinny GEMV rather than cuBLAS (module docstring)
DENSE_NORM_MAX_M = 1  # rows up to which the fp16 GEMV computes the add + RMSNorm in front (module docstring)


def _uses_dense_gemv(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """The rule above: a bias-free fp16 call of at most ``DENSE_GEMV_MAX_M`` rows on CUDA."""
    return (x.is_cuda and weight.dtype == torch.float16 and x.dtype == torch.float16 and weight.is_contiguous()
            and _rows(x) <= DENSE_GEMV_MAX_M)


def _dense_fuses_norm(inp: AddNorm, weight: torch.Tensor) -> bool:
    """Whether the skinny fp16 GEMV computes ``inp``'s add + norm while it stages its activations: where the GEMV
    runs at all (:func:`_uses_dense_gemv`), with an fp16 norm weight and residual of ``x``'s shape, at up to
    ``DENSE_NORM_MAX_M`` rows (the H200 rule, see the module docstring)."""
    x, res, g = inp.x, inp.residual, inp.norm.weight
    return (_rows(x) <= DENSE_NORM_MAX_M and _uses_dense_gemv(x, weight) and g.dtype == torch.float16
            and g.shape == (x.shape[-1],) and g.is_cuda
            and (res is None or (res.dtype == torch.float16 and res.shape == x.shape and res.is_cuda)))


def _dense_prenorm(inp: AddNorm, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(norm(h) @ weight.T, h)`` in the skinny fp16 GEMV (``revolta::dense_linear_add_rms_norm``)."""
    norm = inp.norm
    return ops_quant.dense_linear_add_rms_norm(inp.x, inp.residual, norm.weight, norm.eps, norm.zero_centered, weight)


def dense_matmul(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``F.linear(x, weight)`` (no bias) through the skinny fp16 GEMV where the rule above picks it (lm_head)."""
    if _uses_dense_gemv(x, weight):
        return ops_quant.dense_linear(x, weight)
    return F.linear(x, weight)


class Linear(nn.Module):
    """A dense linear layer whose parameters the loader fills in place.

    With a ``quant`` method the weight is held quantized (see :mod:`revolta_engine.layers.quant`) instead of
    as a dense ``weight``; the method creates, loads and applies it.

    Tensor parallelism (``parallel``, under :func:`~revolta_engine.parallel.tensor_parallel_layout`): a
    ``"column"`` layer holds this rank's slice of the output features, a ``"row"`` layer its slice of the input
    features and sums the partial outputs over the ranks (the bias is added once, after the sum), unless
    ``reduce_results`` is False because the block it ends sums once for several layers (a MoE block). The loader
    hands every checkpoint tensor through :meth:`shard_checkpoint` to keep this rank's part.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = False,
                 quant: QuantLinearMethod | None = None, parallel: str = "none", reduce_results: bool = True) -> None:
        super().__init__()
        layout = get_tp_layout()
        self.parallel = parallel if layout.size > 1 else "none"
        self.reduce_results = reduce_results  # row-parallel: False leaves the sum to the caller (one for a block)
        self.tp_rank = layout.rank
        self.full_in_features, self.full_out_features = in_features, out_features
        self.in_start = self.out_start = 0
        if self.parallel == "column":
            self.out_start, out_features = self._split_out(out_features)
        elif self.parallel == "row":
            self.in_start, in_features = layout.split(in_features, f"the input size of a {in_features}x"
                                                      f"{out_features} layer")
        self.in_features = in_features
        self.out_features = out_features
        self.quant = quant
        if quant is None:
            self.weight = nn.Parameter(torch.empty(out_features, in_features), requires_grad=False)
        else:
            quant.create_weights(self, in_features, out_features)
        self.bias = nn.Parameter(torch.empty(out_features), requires_grad=False) if bias else None

    def _split_out(self, out_features: int) -> tuple[int, int]:
        return get_tp_layout().split(out_features, f"the output size of a {self.full_in_features}x{out_features} "
                                                   "layer")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.parallel == "row":
            return self._reduced(self._matmul(x))
        if self.quant is None and self.bias is not None:
            return F.linear(x, self.weight, self.bias)
        y = self._matmul(x)
        return y if self.bias is None else y + self.bias

    def _matmul(self, x: torch.Tensor) -> torch.Tensor:
        """``x @ W.T`` of the weight this rank holds (no bias)."""
        return dense_matmul(x, self.weight) if self.quant is None else self.quant.apply(self, x)

    def _reduced(self, y: torch.Tensor) -> torch.Tensor:
        """A row-parallel layer's partial output summed over the ranks, then the bias (without the sum: the bias
        goes into rank 0's part)."""
        if self.reduce_results:
            y = tp_all_reduce(y)
        elif self.tp_rank != 0:
            return y
        return y if self.bias is None else y + self.bias

    def checkpoint_axes(self, param_name: str) -> FeatureAxes:
        """Where a checkpoint tensor of this layer keeps its output and input features."""
        if self.quant is not None and param_name in self.quant.param_names:
            return self.quant.checkpoint_axes(param_name, self.full_in_features)
        return FeatureAxes(out_axis=0) if param_name == "bias" else FeatureAxes(out_axis=0, in_axis=1)

    def shard_checkpoint(self, param_name: str, tensor: torch.Tensor, out_start: int | None = None,
                         out_size: int | None = None) -> torch.Tensor:
        """This rank's part of checkpoint tensor ``param_name`` (whole on one rank). ``out_start`` /
        ``out_size``: the output features to keep, when they are not the layer's own column slice."""
        if self.parallel == "none":
            return tensor
        axes = self.checkpoint_axes(param_name)
        if self.parallel == "column":
            start = self.out_start if out_start is None else out_start
            size = self.out_features if out_size is None else out_size
            return narrow_features(tensor, axes.out_axis, axes.out_per_element, start, size, param_name)
        if param_name == "bias":
            return tensor  # row-parallel: the whole bias, added once after the sum
        shard = narrow_features(tensor, axes.in_axis, axes.in_per_element, self.in_start, self.in_features,
                                param_name)
        if param_name == "g_idx":  # groups counted from this rank's first input channel
            return self.quant.shard_g_idx(shard, self.in_start, self.full_in_features)  # type: ignore[union-attr]
        return shard

    def fuses_norm(self, inp: AddNorm) -> bool:
        """Whether :meth:`forward_prenorm` computes ``inp``'s add + norm inside this layer's kernel."""
        if not inp.x.is_cuda or inp.x.dtype != torch.float16 or self.bias is not None or self.parallel == "row":
            return False
        if self.quant is None:
            return _dense_fuses_norm(inp, self.weight)
        return self.quant.fuses_norm(self, inp)

    def forward_prenorm(self, inp: AddNorm) -> tuple[torch.Tensor, torch.Tensor]:
        """``(self(norm(h)), h)`` for ``h = inp.x + inp.residual``, fused where :meth:`fuses_norm` says so."""
        if not self.fuses_norm(inp):
            normed, residual = inp.run()
            return self.forward(normed), residual
        if self.quant is None:
            return _dense_prenorm(inp, self.weight)
        return self.quant.apply_prenorm(self, inp)

    def fuses_norm_rope(self, inp: AddNorm, key_cache: torch.Tensor) -> bool:
        """Whether :meth:`forward_prenorm_rope` runs one kernel for ``inp`` and this KV cache (a quantized projection
        that fuses the norm and whose method takes rotary too)."""
        return self.quant is not None and self.fuses_norm(inp) and self.quant.fuses_rope(self, inp, key_cache)

    def forward_prenorm_rope(self, inp: AddNorm, rope: RopeCache) -> tuple[torch.Tensor, torch.Tensor]:
        """``(q, h)``: this q/k/v projection of ``norm(h)`` with rotary on q and k and the cache write of k and v
        (see :meth:`fuses_norm_rope`); q is ``[T, heads, head_dim]``."""
        assert self.quant is not None
        return self.quant.apply_prenorm_rope(self, inp, rope)

    def fuses_silu(self, x: torch.Tensor) -> bool:
        """Whether :meth:`forward_silu` runs one fused kernel for ``x``: a quantized layer on CUDA, at most 8 rows
        (fp16 weights keep the separate silu_and_mul kernel, see the module docstring)."""
        return self.quant is not None and x.is_cuda and x.dtype == torch.float16 and _rows(x) <= SKINNY_MAX_M

    def forward_silu(self, x: torch.Tensor) -> torch.Tensor:
        """``forward(silu_and_mul(x))`` for ``x = [gate, up]``, fused where :meth:`fuses_silu` says so."""
        if not self.fuses_silu(x):
            return self.forward(ops.silu_and_mul(x))
        assert self.quant is not None
        y = self.quant.apply_silu(self, x)
        if self.parallel == "row":
            return self._reduced(y)
        return y if self.bias is None else y + self.bias

    def permute_outputs(self, order: torch.Tensor) -> None:
        """Reorder the output features at load: output ``j`` becomes what output ``order[j]`` was."""
        if self.quant is None:
            self.weight.data.copy_(self.weight.data.index_select(0, order))
        else:
            self.quant.permute_outputs(self, order)
        if self.bias is not None:
            self.bias.data.copy_(self.bias.data.index_select(0, order))

    def load_quantized(self, param_name: str, tensor: torch.Tensor, start: int = 0, size: int | None = None) -> None:
        """Repack a checkpoint's quantized tensor (qweight, qzeros, scales, g_idx) into output slice ``start``."""
        assert self.quant is not None
        self.quant.load(self, param_name, tensor, start, self.out_features if size is None else size)


# This rank's output features of one part of a merged projection: ranges of the part's features, in order (a
# Gated DeltaNet's conv part keeps a slice of q, of k and of v).
PartSlice = list[tuple[int, int]]


class MergedLinear(Linear):
    """Several projections of the same input stacked on the output dimension (q/k/v, gate/up).

    ``shard_sizes`` are the output sizes of the parts in order; the loader writes part ``i`` with
    :meth:`load_shard`. Column-parallel, each part is split on its own (this rank holds a slice of q, of k and of
    v); ``part_slices`` gives each part's ranges on this rank where an even split is not what the model wants
    (KV heads copied to several ranks, a part made of several tensors).
    """

    def __init__(self, in_features: int, shard_sizes: list[int], bias: bool = False,
                 quant: QuantLinearMethod | None = None, parallel: str = "none",
                 part_slices: list[PartSlice] | None = None) -> None:
        layout = get_tp_layout()
        if parallel == "column" and layout.size > 1:
            slices = part_slices or [[layout.split(n, f"part {i} of a merged {in_features}-input projection "
                                                      f"({n} outputs)")] for i, n in enumerate(shard_sizes)]
        else:
            slices = [[(0, n)] for n in shard_sizes]
        self.part_slices = slices
        self.full_part_sizes = list(shard_sizes)
        super().__init__(in_features, sum(size for ranges in slices for _, size in ranges), bias, quant, parallel)
        self.shard_sizes = [sum(size for _, size in ranges) for ranges in slices]
        self.shard_offsets = [sum(self.shard_sizes[:i]) for i in range(len(self.shard_sizes))]

    def _split_out(self, out_features: int) -> tuple[int, int]:
        return 0, out_features  # the parts are split one by one (part_slices)

    def _cut(self, param_name: str, tensor: torch.Tensor, offset: int, ranges: PartSlice) -> torch.Tensor:
        """The ranges (features of a part that starts at ``offset``) of a checkpoint tensor."""
        pieces = [Linear.shard_checkpoint(self, param_name, tensor, offset + start, size) for start, size in ranges]
        axis = self.checkpoint_axes(param_name).out_axis
        return pieces[0] if len(pieces) == 1 else torch.cat(pieces, dim=axis if axis is not None else 0)

    def shard_checkpoint(self, param_name: str, tensor: torch.Tensor, out_start: int | None = None,
                         out_size: int | None = None) -> torch.Tensor:
        """As :meth:`Linear.shard_checkpoint`; a whole merged tensor (all parts stacked, as some checkpoints store
        them) keeps this rank's slice of every part."""
        axes = self.checkpoint_axes(param_name)
        if self.parallel != "column" or out_start is not None or axes.out_axis is None:
            return super().shard_checkpoint(param_name, tensor, out_start, out_size)
        pieces, offset = [], 0
        for full, ranges in zip(self.full_part_sizes, self.part_slices, strict=True):
            pieces.append(self._cut(param_name, tensor, offset, ranges))
            offset += full
        return torch.cat(pieces, dim=axes.out_axis)

    def load_shard(self, index: int, param_name: str, tensor: torch.Tensor) -> None:
        """Copy one part's weight or bias (the checkpoint's whole part; this rank's slice is kept) into its slice."""
        start, size = self.shard_offsets[index], self.shard_sizes[index]
        if self.parallel == "column" and self.checkpoint_axes(param_name).out_axis is not None:
            tensor = self._cut(param_name, tensor, 0, self.part_slices[index])
        if self.quant is not None and param_name in self.quant.param_names:
            self.load_quantized(param_name, tensor, start, size)
            return
        target = getattr(self, param_name)
        if tensor.shape[0] != size or tensor.shape[1:] != target.shape[1:]:
            raise ValueError(f"expected shape {(size, *target.shape[1:])}, got {tuple(tensor.shape)}")
        target.data[start:start + size].copy_(tensor)

    def split(self, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return y.split(self.shard_sizes, dim=-1)
