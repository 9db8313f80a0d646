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

from revolta_engine.forward_context import get_forward_context
from revolta_engine.layers.linear import Linear, MergedLinear
from revolta_engine.layers.norm import AddNorm
from revolta_engine.layers.quant import QuantConfig, make_linear_method
from revolta_kernels import ops_hybrid


class _Weight(nn.Module):
    """A module holding one parameter named ``weight`` (checkpoint layout of ``conv1d`` and gated norms)."""

    def __init__(self, *shape: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(*shape), requires_grad=False)


class GatedDeltaNet(nn.Module):
    """One linear-attention layer; ``state_idx`` picks its pool among the model's Gated DeltaNet layers.

    ``quant``: the checkpoint's quantization (the layer then has the split input projections); ``name``: the
    layer's checkpoint name (``model.layers.0.linear_attn``), for the quantization config's per-module rules.
    """

    def __init__(self, config: PretrainedConfig, state_idx: int, quant: QuantConfig | None = None,
                 name: str = "linear_attn") -> None:
        super().__init__()
        self.state_idx = state_idx
        self.num_k_heads = config.linear_num_key_heads
        self.num_v_heads = config.linear_num_value_heads
        self.head_k_dim = config.linear_key_head_dim
        self.head_v_dim = config.linear_value_head_dim
        self.key_dim = self.num_k_heads * self.head_k_dim
        self.value_dim = self.num_v_heads * self.head_v_dim
        self.conv_dim = 2 * self.key_dim + self.value_dim
        self.conv_kernel = config.linear_conv_kernel_dim
        if getattr(config, "hidden_act", "silu") != "silu":
            raise ValueError(f"Gated DeltaNet with activation {config.hidden_act!r} is not supported (only silu)")
        self.eps = config.rms_norm_eps
        self.in_proj_ba: MergedLinear | None = None
        if quant is None:
            self.in_proj = MergedLinear(config.hidden_size,
                                        [self.conv_dim, self.value_dim, self.num_v_heads, self.num_v_heads])
        else:
            self.in_proj = MergedLinear(config.hidden_size, [self.conv_dim, self.value_dim], quant=make_linear_method(
                quant, f"{name}.in_proj_qkvz", (f"{name}.in_proj_qkv", f"{name}.in_proj_z")))
            self.in_proj_ba = MergedLinear(config.hidden_size, [self.num_v_heads, self.num_v_heads])
        self.conv1d = _Weight(self.conv_dim, 1, self.conv_kernel)
        self.dt_bias = nn.Parameter(torch.empty(self.num_v_heads), requires_grad=False)
        self.A_log = nn.Parameter(torch.empty(self.num_v_heads), requires_grad=False)
        self.norm = _Weight(self.head_v_dim)
        self.out_proj = Linear(self.value_dim, config.hidden_size, quant=make_linear_method(quant, f"{name}.out_proj"))

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
            out = ops_hybrid.gated_delta_rule_decode_fused_conv(qkv, weight, cache.conv, a, b, self.A_log,
                                                                self.dt_bias, z, self.norm.weight, self.eps,
                                                                cache.recurrent, meta.state_indices, True)
            return self.out_proj(out.reshape(n, self.value_dim))
        qkv = ops_hybrid.causal_conv1d(qkv.contiguous(), weight, None, cache.conv, attn.query_start_loc,
                                       meta.state_indices, True, meta.snapshot_seq, meta.snapshot_len,
                                       meta.snapshot_slot)
        q, k, v = qkv.split([self.key_dim, self.key_dim, self.value_dim], dim=-1)
        q = q.reshape(n, self.num_k_heads, self.head_k_dim)
        k = k.reshape(n, self.num_k_heads, self.head_k_dim)
        v = v.reshape(n, self.num_v_heads, self.head_v_dim)
        g, beta = ops_hybrid.gdn_gating(a, b, self.A_log, self.dt_bias)
        out = ops_hybrid.gated_delta_rule_prefill(q, k, v, g, beta, cache.recurrent, attn.query_start_loc,
                                                  meta.state_indices, True, meta.snapshot_seq, meta.snapshot_len,
                                                  meta.snapshot_slot)
        out = ops_hybrid.rms_norm_gated(out, z, self.norm.weight, self.eps)
        return self.out_proj(out.reshape(n, self.value_dim))
