"""Gated DeltaNet linear attention (Qwen3-Next, Qwen3.5) over the per-request state pool.

Input projections are one merged GEMM ``[qkv | z | b | a]`` (Qwen3.5's split tensors load straight into it;
Qwen3-Next's interleaved ``in_proj_qkvz`` / ``in_proj_ba`` are reordered at load time). In a quantized
checkpoint ``[qkv | z]`` is quantized and ``[b | a]`` (a few dozen outputs) stays fp16, as AWQ and GPTQ
quantizers leave it, so the layer holds two projections there: ``in_proj`` and ``in_proj_ba``. q/k/v pass a causal
depthwise conv1d (SiLU) that continues from the request's conv state, then the gated delta rule with
``beta = sigmoid(b)`` and log-decay ``g = -exp(A_log) * softplus(a + dt_bias)`` updates the float32
recurrent state; the output goes through a gated RMSNorm (``silu(z)``) and ``out_proj``.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import PretrainedConfig

from revolta_engine.errors import UnsupportedModelError
from revolta_engine.forward_context import get_forward_context
from revolta_engine.layers.linear import Linear, MergedLinear, PartSlice
from revolta_engine.layers.norm import AddNorm
from revolta_engine.layers.quant import QuantConfig, make_linear_method
from revolta_engine.parallel.sharding import narrow_features
from revolta_engine.parallel.state import get_tp_layout
from revolta_kernels import ops_gdn


class _Weight(nn.Module):
    """A module holding one parameter named ``weight`` (checkpoint layout of ``conv1d`` and gated norms).

    ``rows``: tensor parallelism keeps these ranges of the checkpoint's first axis (None: the whole tensor)."""

    def __init__(self, *shape: int, rows: PartSlice | None = None) -> None:
        super().__init__()
        self.rows = rows
        if rows is not None:
            shape = (sum(size for _, size in rows), *shape[1:])
        self.weight = nn.Parameter(torch.empty(*shape), requires_grad=False)

    def shard_checkpoint(self, param_name: str, tensor: torch.Tensor) -> torch.Tensor:
        """This rank's rows of the checkpoint tensor."""
        if self.rows is None:
            return tensor
        return torch.cat([narrow_features(tensor, 0, 1, start, size, param_name) for start, size in self.rows])


def _split_heads(total: int, what: str) -> tuple[int, int]:
    try:
        return get_tp_layout().split(total, what)
    except ValueError as e:
        raise UnsupportedModelError(str(e)) from None


class GatedDeltaNet(nn.Module):
    """One linear-attention layer; ``state_idx`` picks its pool among the model's Gated DeltaNet layers.

    ``quant``: the checkpoint's quantization (the layer then has the split input projections); ``name``: the
    layer's checkpoint name (``model.layers.0.linear_attn``), for the quantization config's per-module rules.
    """

    def __init__(self, config: PretrainedConfig, state_idx: int, quant: QuantConfig | None = None,
                 name: str = "linear_attn") -> None:
        super().__init__()
        self.state_idx = state_idx
        self.head_k_dim = config.linear_key_head_dim
        self.head_v_dim = config.linear_value_head_dim
        # tensor parallelism: this rank's key heads and the value heads that read them (all on one rank)
        k_first, self.num_k_heads = _split_heads(config.linear_num_key_heads, "linear_num_key_heads")
        v_first, self.num_v_heads = _split_heads(config.linear_num_value_heads, "linear_num_value_heads")
        self.key_dim = self.num_k_heads * self.head_k_dim
        self.value_dim = self.num_v_heads * self.head_v_dim
        self.conv_dim = 2 * self.key_dim + self.value_dim
        full_key = config.linear_num_key_heads * self.head_k_dim
        full_value = config.linear_num_value_heads * self.head_v_dim
        k0, v0 = k_first * self.head_k_dim, v_first * self.head_v_dim
        conv_rows: PartSlice = [(k0, self.key_dim), (full_key + k0, self.key_dim), (2 * full_key + v0, self.value_dim)]
        self.v_heads_first = v_first
        full_conv = 2 * full_key + full_value
        nv = config.linear_num_value_heads
        parts = [[*conv_rows], [(v0, self.value_dim)], [(v_first, self.num_v_heads)], [(v_first, self.num_v_heads)]]
        self.conv_kernel = config.linear_conv_kernel_dim
        if getattr(config, "hidden_act", "silu") != "silu":
            raise ValueError(f"Gated DeltaNet with activation {config.hidden_act!r} is not supported (only silu)")
        self.eps = config.rms_norm_eps
        self.in_proj_ba: MergedLinear | None = None
        if quant is None:
            self.in_proj = MergedLinear(config.hidden_size, [full_conv, full_value, nv, nv], parallel="column",
                                        part_slices=parts)
        else:
            self.in_proj = MergedLinear(config.hidden_size, [full_conv, full_value], quant=make_linear_method(
                quant, f"{name}.in_proj_qkvz", (f"{name}.in_proj_qkv", f"{name}.in_proj_z")), parallel="column",
                part_slices=parts[:2])
            self.in_proj_ba = MergedLinear(config.hidden_size, [nv, nv], parallel="column", part_slices=parts[2:])
        split = get_tp_layout().size > 1
        self.conv1d = _Weight(full_conv, 1, self.conv_kernel, rows=conv_rows if split else None)
        self.dt_bias = nn.Parameter(torch.empty(self.num_v_heads), requires_grad=False)
        self.A_log = nn.Parameter(torch.empty(self.num_v_heads), requires_grad=False)
        self.norm = _Weight(self.head_v_dim)
        self.out_proj = Linear(full_value, config.hidden_size, quant=make_linear_method(quant, f"{name}.out_proj"),
                               parallel="row")

    def shard_checkpoint(self, param_name: str, tensor: torch.Tensor) -> torch.Tensor:
        """This rank's value heads of ``dt_bias`` and ``A_log``."""
        if tensor.shape[0] == self.num_v_heads:
            return tensor
        return narrow_features(tensor, 0, 1, self.v_heads_first, self.num_v_heads, param_name)

    def forward(self, inp: AddNorm) -> tuple[torch.Tensor, torch.Tensor]:
        """The layer on ``norm(h)`` (norm fused into the input projection where it can be), and ``h``."""
        y, residual = self.in_proj.forward_prenorm(inp)
        if self.in_proj_ba is None:
            qkv, z, b, a = self.in_proj.split(y)
        else:
            # h is the residual stream now: the fp16 projection normalizes it again inside its own kernel at decode
            ba, _ = self.in_proj_ba.forward_prenorm(AddNorm(residual, None, inp.norm))
            (qkv, z), (b, a) = self.in_proj.split(y), self.in_proj_ba.split(ba)
        return self._mix(qkv, z, b, a), residual

    def _mix(self, qkv: torch.Tensor, z: torch.Tensor, b: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        ctx = get_forward_context()
        meta, attn = ctx.state, ctx.attn
        assert meta is not None, "a Gated DeltaNet layer ran without state metadata"
        cache = ctx.state_caches[self.state_idx]
        n = qkv.shape[0]
        weight = self.conv1d.weight.squeeze(1)
        decode = attn.max_query_len == 1 and meta.snapshot_seq.numel() == 0
        z = z.reshape(n, self.num_v_heads, self.head_v_dim)
        if decode:  # conv update, gating, delta rule and gated norm in one op (one kernel on the GPU at batch 1)
            out = ops_gdn.gated_delta_rule_decode_fused_conv(qkv, weight, cache.conv, a, b, self.A_log,
                                                                self.dt_bias, z, self.norm.weight, self.eps,
                                                                cache.recurrent, meta.state_indices, True)
            return self.out_proj(out.reshape(n, self.value_dim))
        qkv = ops_gdn.causal_conv1d(qkv.contiguous(), weight, None, cache.conv, attn.query_start_loc,
                                       meta.state_indices, True, meta.snapshot_seq, meta.snapshot_len,
                                       meta.snapshot_slot)
        q, k, v = qkv.split([self.key_dim, self.key_dim, self.value_dim], dim=-1)
        q = q.reshape(n, self.num_k_heads, self.head_k_dim)
        k = k.reshape(n, self.num_k_heads, self.head_k_dim)
        v = v.reshape(n, self.num_v_heads, self.head_v_dim)
        g, beta = ops_gdn.gdn_gating(a, b, self.A_log, self.dt_bias)
        out = ops_gdn.gated_delta_rule_prefill(q, k, v, g, beta, cache.recurrent, attn.query_start_loc,
                                                  meta.state_indices, True, meta.snapshot_seq, meta.snapshot_len,
                                                  meta.snapshot_slot)
        out = ops_gdn.rms_norm_gated(out, z, self.norm.weight, self.eps)
        return self.out_proj(out.reshape(n, self.value_dim))
