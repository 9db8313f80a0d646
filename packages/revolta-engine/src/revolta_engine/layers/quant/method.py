"""Quantized linear layers: the parameters, the repack of checkpoint tensors at load, and the matmul.

Every method stores the kernel layout of :mod:`revolta_kernels.reference.quant` (int32 ``qweight``
``[K / pack, N]`` packed along K, ``scales`` ``[K / G, N]``, int32 ``qzeros`` ``[K / G, N / pack]`` packed
along N, still 4 or 8 bits wide), so merged projections (q/k/v, gate/up) are one GEMM over their concatenated
columns. AWQ's column-interleaved packing is converted once at load; GPTQ is already packed along K.

GPTQ act-order (``desc_act``) checkpoints quantize the input channels in a permuted order, so the rows of one
group are scattered over K (``g_idx[k]`` is row k's group). Once every tensor of a layer is in
(:meth:`QuantLinearMethod.finish_loading`), its packed rows are sorted by group - stably, so ``act_perm`` =
``argsort(g_idx)`` (int32, as the kernels read it) - and the layer's ops take it as ``x_order``: ``x[..., act_perm]
@ W`` is the same sum over the permuted channels. The skinny CUDA kernels gather the channels while staging their
activations, inside the fused residual add + RMSNorm, rotary and SiLU-and-mul kernels too, so an act-order layer
keeps every fusion. The parts of a merged projection share their input, so they must share ``g_idx``. Where the
input comes straight from another projection (a Llama MLP's down projection), the model folds the order into that
projection's output columns instead (:meth:`QuantLinearMethod.take_input_order`), and no gather runs at all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn

import revolta_kernels
from revolta_engine.errors import ModelLoadError, UnsupportedModelError
from revolta_engine.layers.quant.config import QuantConfig
from revolta_engine.parallel.sharding import FeatureAxes
from revolta_kernels import ops_quant
from revolta_kernels.reference.quant import pack_int32, unpack_int32

if TYPE_CHECKING:
    from revolta_engine.layers.norm import AddNorm
    from revolta_engine.layers.rotary import RopeCache

# AutoAWQ packs the 8 columns of a word in the order 0, 2, 4, 6, 1, 3, 5, 7 (field i holds column AWQ_ORDER[i]).
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)
AWQ_UNDO = (0, 4, 1, 5, 2, 6, 3, 7)


# Output columns per slice when act-order rows are sorted at load (bounds the unpacked copy's memory)
_REPACK_COLUMNS = 2048


def _int32_param(*shape: int) -> nn.Parameter:
    return nn.Parameter(torch.zeros(shape, dtype=torch.int32), requires_grad=False)


class QuantLinearMethod:
    """Creates, loads and applies the quantized weight of one :class:`~revolta_engine.layers.linear.Linear`."""

    param_names: tuple[str, ...] = ("qweight", "qzeros", "scales")

    def __init__(self, config: QuantConfig, module_name: str = "") -> None:
        self.config = config
        self.bits = config.bits
        self.pack = 32 // config.bits
        self.module_name = module_name  # the checkpoint's name of the layer, for error messages

    def create_weights(self, layer: Any, in_features: int, out_features: int) -> None:
        """Register ``qweight``, ``scales`` and ``qzeros`` (kernel layout) on ``layer``."""
        group = self.config.group_for(in_features)
        if in_features % group or in_features % self.pack or out_features % self.pack:
            where = f"{self.module_name}: " if self.module_name else ""
            raise ModelLoadError(
                f"{where}a {in_features}x{out_features} layer cannot hold {self.config.method} {self.bits}-bit "
                f"weights with group size {group} (the input size must be a multiple of the group size and of "
                f"{self.pack})"
            )
        layer.group_size = group
        layer.qweight = _int32_param(in_features // self.pack, out_features)
        layer.scales = nn.Parameter(torch.empty(in_features // group, out_features), requires_grad=False)
        layer.qzeros = _int32_param(in_features // group, out_features // self.pack)
        layer.register_buffer("act_perm", None, persistent=False)  # act-order: set by finish_loading
        layer.order_code = False  # set by take_input_order where the layer before gathers (see apply_silu)
        layer.int8_activations = False  # set from the engine's activation_quant (layers.activation_quant)

    def expected_shape(self, name: str, in_features: int, out: int, group: int) -> tuple[int, ...]:
        """Shape of checkpoint tensor ``name`` for a part with ``out`` output features."""
        raise NotImplementedError

    def to_kernel_layout(self, name: str, tensor: torch.Tensor) -> torch.Tensor:
        """Convert a checkpoint tensor (already shape-checked) into the kernel layout of its slice."""
        raise NotImplementedError

    def checkpoint_axes(self, name: str, full_in_features: int) -> FeatureAxes:
        """Where checkpoint tensor ``name`` of a layer with ``full_in_features`` inputs keeps its output and input
        features (tensor parallelism cuts a rank's share along them)."""
        raise NotImplementedError

    def shard_g_idx(self, g_idx: torch.Tensor, in_start: int, full_in_features: int) -> torch.Tensor:
        """A row-parallel rank's slice of ``g_idx`` (input channels ``in_start`` on), renumbered from its first
        group. Act-order checkpoints scatter a group's channels over the whole input, so their slices would need
        groups of other ranks: refused (ValueError)."""
        group = self.config.group_for(full_in_features)
        first = in_start // group
        local = g_idx.to(torch.int64) - first
        groups = (g_idx.numel() + group - 1) // group
        if local.numel() and (int(local.min()) < 0 or int(local.max()) >= groups):
            raise ValueError("an act-order (desc_act) GPTQ layer cannot be split over its input channels across "
                             "tensor-parallel ranks (its groups span the whole input); use tensor_parallel_size 1 "
                             "or a checkpoint quantized without desc_act")
        return local.to(g_idx.dtype)

    def load(self, layer: Any, name: str, tensor: torch.Tensor, start: int, size: int) -> None:
        """Check, repack and copy checkpoint tensor ``name`` of the part ``[start, start + size)`` of N."""
        in_features, group = layer.in_features, layer.group_size
        expected = self.expected_shape(name, in_features, size, group)
        if tuple(tensor.shape) != expected:
            raise ValueError(f"expected shape {expected} for {self.config.method} {self.bits}-bit {name}, "
                             f"got {tuple(tensor.shape)}")
        if name != "scales" and tensor.dtype not in (torch.int32, torch.uint32):
            raise ValueError(f"{name} must be int32, got {tensor.dtype}")
        if name == "scales" and not tensor.dtype.is_floating_point:  # a copy would cast integers silently
            raise ValueError(f"scales must be floating point (float16, bfloat16 or float32), got {tensor.dtype}")
        if name == "g_idx":
            self._load_g_idx(layer, tensor)
            return
        if start % self.pack or size % self.pack:
            raise ValueError(f"part of {size} columns at {start} is not a multiple of {self.pack} columns")
        value = self.to_kernel_layout(name, tensor.view(torch.int32) if name != "scales" else tensor)
        if name == "qzeros":
            layer.qzeros.data[:, start // self.pack:(start + size) // self.pack].copy_(value)
        else:
            getattr(layer, name).data[:, start:start + size].copy_(value)

    def _load_g_idx(self, layer: Any, g_idx: torch.Tensor) -> None:
        """Keep a part's ``g_idx`` (checked: groups in range, the same for every part of a merged layer)."""
        groups = layer.in_features // layer.group_size
        g = g_idx.to(torch.int64).cpu()
        if g.numel() and (int(g.min()) < 0 or int(g.max()) >= groups):
            raise ValueError(f"g_idx holds groups outside 0..{groups - 1} ({groups} groups of {layer.group_size} "
                             f"input channels)")
        if getattr(layer, "g_idx_loaded", False):
            if not torch.equal(layer.g_idx.data.to(torch.int64).cpu(), g):
                raise ValueError("g_idx differs between the parts of this merged projection (q/k/v or gate/up); "
                                 "they share one input, so act-order must order its channels the same way for all")
            return
        layer.g_idx.data.copy_(g.to(torch.int32))
        layer.g_idx_loaded = True

    def fill_dummy_g_idx(self, layer: Any, gen: torch.Generator) -> None:
        """``load_format="dummy"``: the input channels' groups in order, or shuffled as act-order checkpoints
        have them when the config says ``desc_act``."""
        k, device = layer.in_features, layer.g_idx.device
        g = torch.arange(k, device=device) // layer.group_size
        if self.config.desc_act:
            g = g[torch.randperm(k, generator=gen, device=device)]
        layer.g_idx.data.copy_(g.to(torch.int32))
        layer.g_idx_loaded = True

    def finish_loading(self, layer: Any) -> None:
        """Called once every tensor of ``layer`` is loaded: act-order GPTQ's packed rows sorted by group (see the
        module docstring; ``layer.act_perm``). Raises ValueError if ``g_idx`` does not give every group exactly
        ``group_size`` input channels."""
        if not getattr(layer, "g_idx_loaded", False):
            return
        g = layer.g_idx.data.to(torch.int64)
        k, group = layer.in_features, layer.group_size
        if torch.equal(g, torch.arange(k, device=g.device) // group):
            return
        counts = torch.bincount(g, minlength=k // group)
        if not bool((counts == group).all()):
            raise ValueError(f"g_idx gives groups of {int(counts.min())}-{int(counts.max())} input channels; "
                             f"act-order checkpoints have exactly {group} (the group size) in each")
        perm = torch.argsort(g, stable=True).to(torch.int32)
        qweight = layer.qweight.data
        for c in range(0, qweight.shape[1], _REPACK_COLUMNS):  # in slices: unpacked rows take 8-16x the bytes
            part = qweight[:, c:c + _REPACK_COLUMNS]
            part.copy_(pack_int32(unpack_int32(part, self.bits, 0).index_select(0, perm), self.bits, 0))
        layer.register_buffer("act_perm", perm, persistent=False)
        layer.g_idx.data.copy_(g.index_select(0, perm).to(torch.int32))  # now the groups of the sorted rows: a second call keeps them

    def take_input_order(self, layer: Any, caller_gathers: bool = False) -> torch.Tensor | None:
        """The layer's input order (act-order), handed to a caller that delivers its input already in that order
        (:meth:`permute_outputs` on the layer before); the layer stops gathering. ``caller_gathers``: that caller
        is itself act-order, so the layer keeps running the act-order kernel's code (without a gather; see
        :meth:`apply_silu`)."""
        perm = layer.act_perm
        layer.act_perm = None
        layer.order_code = perm is not None and caller_gathers
        return perm

    def permute_outputs(self, layer: Any, order: torch.Tensor) -> None:
        """Reorder the layer's output columns: output ``j`` becomes what output ``order[j]`` was."""
        layer.qweight.data.copy_(layer.qweight.data.index_select(1, order))
        layer.scales.data.copy_(layer.scales.data.index_select(1, order))
        zeros = unpack_int32(layer.qzeros.data, self.bits, 1).index_select(1, order)
        layer.qzeros.data.copy_(pack_int32(zeros, self.bits, 1))

    def apply(self, layer: Any, x: torch.Tensor) -> torch.Tensor:
        """``x @ W`` for the layer's quantized ``W`` (act-order: in the order of its packed rows)."""
        return ops_quant.quant_matmul(x, layer.qweight, layer.scales, layer.qzeros, self.bits, layer.group_size,
                                      self.config.zero_offset, layer.act_perm, layer.int8_activations)

    def fuses_norm(self, layer: Any, inp: AddNorm) -> bool:
        """Whether :meth:`apply_prenorm` computes ``inp``'s add + norm inside the quantized kernel: CUDA fp16
        activations and norm weight, at most ``SKINNY_MAX_M`` rows (the skinny int4/int8 kernel stages
        ``norm(x + residual)`` itself), the native library loaded. (:meth:`Linear.fuses_norm` has already
        checked CUDA fp16 ``x`` and no bias.)"""
        x, w = inp.x, inp.norm.weight
        k = x.shape[-1]
        rows = x.numel() // k if k else 0
        return (
            revolta_kernels.native_available()
            and 0 < rows <= ops_quant.SKINNY_MAX_M and k == layer.in_features
            and x.is_cuda and x.dtype == torch.float16 and w.dtype == torch.float16 and w.device == x.device
            and (inp.residual is None or (inp.residual.dtype == torch.float16 and inp.residual.shape == x.shape))
        )

    def apply_prenorm(self, layer: Any, inp: AddNorm) -> tuple[torch.Tensor, torch.Tensor]:
        """``(norm(h) @ W, h)`` for ``h = inp.x + inp.residual`` in one kernel (see :meth:`fuses_norm`);
        ``h`` is a new tensor (``revolta::quant_matmul_add_rms_norm``)."""
        norm = inp.norm
        return ops_quant.quant_matmul_add_rms_norm(inp.x, inp.residual, norm.weight, norm.eps, norm.zero_centered,
                                                   layer.qweight, layer.scales, layer.qzeros, self.bits,
                                                   layer.group_size, self.config.zero_offset, layer.act_perm,
                                                   layer.int8_activations)

    def fuses_rope(self, layer: Any, inp: AddNorm, key_cache: torch.Tensor) -> bool:
        """Whether :meth:`apply_prenorm_rope` runs the one kernel with the rotary + cache epilogue: int4 group 128,
        at most ``QKV_ROPE_MAX_M`` tokens, an fp16 cache (:meth:`fuses_norm` checked by the caller). The kernel
        checks the head layout itself and the op falls back to the two steps where it does not take the call."""
        rows = inp.x.numel() // inp.x.shape[-1] if inp.x.shape[-1] else 0
        return (self.bits == 4 and layer.group_size == 128 and 0 < rows <= ops_quant.QKV_ROPE_MAX_M
                and key_cache.dtype == torch.float16)

    def apply_prenorm_rope(self, layer: Any, inp: AddNorm, rope: RopeCache) -> tuple[torch.Tensor, torch.Tensor]:
        """``(q, h)``: :meth:`apply_prenorm` of a q/k/v projection, then rotary on q and k and the cache write of k
        and v, in one kernel where it applies (``revolta::quant_qkv_rope_cache``)."""
        norm = inp.norm
        return ops_quant.quant_qkv_rope_cache(
            inp.x, inp.residual, norm.weight, norm.eps, norm.zero_centered, layer.qweight, layer.scales, layer.qzeros,
            self.bits, layer.group_size, self.config.zero_offset, rope.positions, rope.cos_sin_cache, rope.is_neox,
            rope.num_heads, rope.key_cache, rope.value_cache, rope.slot_mapping, rope.k_scales, rope.v_scales,
            layer.act_perm, layer.int8_activations,
        )

    def apply_silu(self, layer: Any, x: torch.Tensor) -> torch.Tensor:
        """``silu_and_mul(x) @ W`` for ``x = [gate, up]`` (one fused kernel at decode sizes on CUDA).

        A down projection whose order went into an act-order gate/up projection passes ``order_code``: the split-K
        kernel then runs the gathering kernel's code, as gate/up did, without gathering. Same result; on the H200
        it was ~2 us faster per layer than the plain kernel's code after that gate/up (Llama-3.1-8B GPTQ act-order
        batch 1: 474.2 against 453.4 tok/s)."""
        return ops_quant.quant_matmul_silu(x, layer.qweight, layer.scales, layer.qzeros, self.bits,
                                           layer.group_size, self.config.zero_offset, layer.act_perm,
                                           layer.order_code, layer.int8_activations)


class AWQLinearMethod(QuantLinearMethod):
    """AutoAWQ "GEMM" checkpoints: qweight ``[K, N / 8]`` and qzeros ``[K / G, N / 8]`` packed along N."""

    def expected_shape(self, name: str, in_features: int, out: int, group: int) -> tuple[int, ...]:
        rows = in_features if name == "qweight" else in_features // group
        return (rows, out) if name == "scales" else (rows, out // self.pack)

    def to_kernel_layout(self, name: str, tensor: torch.Tensor) -> torch.Tensor:
        if name == "scales":
            return tensor
        fields = unpack_int32(tensor, 4, 1)
        natural = fields.view(fields.shape[0], -1, 8)[..., list(AWQ_UNDO)].reshape(fields.shape)
        return pack_int32(natural, 4, 0 if name == "qweight" else 1)

    def checkpoint_axes(self, name: str, full_in_features: int) -> FeatureAxes:
        group = self.config.group_for(full_in_features)
        return {
            "qweight": FeatureAxes(1, 0, self.pack, 1),
            "qzeros": FeatureAxes(1, 0, self.pack, group),
            "scales": FeatureAxes(1, 0, 1, group),
        }[name]


class GPTQLinearMethod(QuantLinearMethod):
    """GPTQ checkpoints: qweight ``[K / pack, N]`` packed along K, qzeros ``[K / G, N / pack]``, g_idx ``[K]``."""

    param_names = ("qweight", "qzeros", "scales", "g_idx")

    def create_weights(self, layer: Any, in_features: int, out_features: int) -> None:
        super().create_weights(layer, in_features, out_features)
        # The groups of the packed rows (an act-order checkpoint's are sorted at load: see finish_loading).
        layer.g_idx = _int32_param(in_features)

    def expected_shape(self, name: str, in_features: int, out: int, group: int) -> tuple[int, ...]:
        return {
            "qweight": (in_features // self.pack, out),
            "qzeros": (in_features // group, out // self.pack),
            "scales": (in_features // group, out),
            "g_idx": (in_features,),
        }[name]

    def to_kernel_layout(self, name: str, tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    def checkpoint_axes(self, name: str, full_in_features: int) -> FeatureAxes:
        group = self.config.group_for(full_in_features)
        return {
            "qweight": FeatureAxes(1, 0, 1, self.pack),
            "qzeros": FeatureAxes(1, 0, self.pack, group),
            "scales": FeatureAxes(1, 0, 1, group),
            "g_idx": FeatureAxes(None, 0, 1, 1),
        }[name]


def make_linear_method(config: QuantConfig | None, module_name: str,
                       parts: tuple[str, ...] = ()) -> QuantLinearMethod | None:
    """The quantized-linear method of ``module_name`` (the checkpoint's name of the module, such as
    ``model.layers.3.mlp.down_proj``), or None where the checkpoint keeps it unquantized.

    ``parts``: the checkpoint names of the projections a merged module stacks (``q_proj``, ``k_proj``, ``v_proj``).
    They run as one GEMM, so per-module rules must treat them alike; a rule on the merged name itself (as vLLM
    names it, ``qkv_proj``) applies to the whole module."""
    if config is None:
        return None
    resolved = {config.for_module(name) for name in parts or (module_name,)}
    if len(resolved) > 1:
        raise UnsupportedModelError(
            f"quantization_config treats the parts of {module_name} ({', '.join(parts)}) differently; ReVolta runs "
            "them as one merged layer, so they must share one quantization (or all stay unquantized)")
    chosen = resolved.pop()
    merged = config.for_module(module_name) if parts else chosen
    if merged != config:
        chosen = merged
    if chosen is None:
        return None
    cls = AWQLinearMethod if chosen.method == "awq" else GPTQLinearMethod
    return cls(chosen, module_name)
