"""Problems of ``revolta::quant_qkv_rope_cache`` (the q/k/v projection with rotary and the cache write) and their
float64 oracle, shared by the CPU and GPU tests."""

from __future__ import annotations

import torch
from kernels_cases import cos_sin_table

from revolta_kernels.reference import norm as ref_norm
from revolta_kernels.reference import quant as rq

BLOCKS, BLOCK_SIZE, MAX_POS = 6, 16, 4096
SENTINEL = -777.0  # what the cache holds where the call must not write
EPS = 1e-5


def make_case(m: int, k: int, heads: int, kv_heads: int, d: int, rot_dim: int, seed: int, residual: bool,
              slots: list[int], device: str = "cuda") -> tuple:
    """(x, residual, norm weight, qweight, scales, qzeros, positions, cos_sin, key cache, value cache, slots) for
    ``m`` tokens, hidden size ``k``, int4 group 128 weights of (heads + 2 kv_heads) x d columns."""
    gen = torch.Generator(device=device).manual_seed(seed)
    n = (heads + 2 * kv_heads) * d
    qweight = torch.randint(-(2**31), 2**31 - 1, (k // 8, n), dtype=torch.int32, device=device, generator=gen)
    qzeros = torch.randint(-(2**31), 2**31 - 1, (k // 128, n // 8), dtype=torch.int32, device=device, generator=gen)
    scales = (torch.rand(k // 128, n, device=device, generator=gen) * 0.01 + 1e-3).half()
    x = (torch.randn(m, k, device=device, generator=gen) * 3).half()
    res = (torch.randn(m, k, device=device, generator=gen) * 5).half() if residual else None
    w = (torch.rand(k, device=device, generator=gen) * 1.5 + 0.25).half()
    positions = torch.randint(0, MAX_POS, (m,), device=device, generator=gen)
    cache_shape = (BLOCKS, kv_heads, BLOCK_SIZE, d)
    kc = torch.full(cache_shape, SENTINEL, dtype=torch.float16, device=device)
    vc = torch.full(cache_shape, SENTINEL, dtype=torch.float16, device=device)
    return (x, res, w, qweight, scales, qzeros, positions, cos_sin_table(MAX_POS, rot_dim, device), kc, vc,
            torch.tensor(slots, device=device))


def _rotate(t: torch.Tensor, cs: torch.Tensor, neox: bool) -> torch.Tensor:
    rot = cs.shape[-1]
    cos, sin = cs[:, None, : rot // 2], cs[:, None, rot // 2:]
    out = t.clone()
    if neox:
        x1, x2 = t[..., : rot // 2], t[..., rot // 2: rot]
        out[..., : rot // 2], out[..., rot // 2: rot] = x1 * cos - x2 * sin, x2 * cos + x1 * sin
    else:
        x1, x2 = t[..., 0:rot:2], t[..., 1:rot:2]
        out[..., 0:rot:2], out[..., 1:rot:2] = x1 * cos - x2 * sin, x2 * cos + x1 * sin
    return out


def oracle(x, res, w, zc, qweight, scales, qzeros, positions, cos_sin, neox, heads, kv_heads, d, x_order=None):
    """float64 (q [T, H, D], k [T, Hkv, D], v [T, Hkv, D]): dequantized W, the normed activation (its channels in
    ``x_order`` when given), rotary."""
    normed = (ref_norm.fused_add_rms_norm(x, res, w, EPS, zc)[0] if res is not None
              else ref_norm.rms_norm(x, w, EPS, zc))
    if x_order is not None:
        normed = normed[..., x_order.long()]
    wd = rq.dequantize(qweight, scales, qzeros, 4, 128, 0).double()
    qkv = normed.double() @ wd
    q = qkv[:, : heads * d].view(-1, heads, d)
    k = qkv[:, heads * d: (heads + kv_heads) * d].view(-1, kv_heads, d)
    v = qkv[:, (heads + kv_heads) * d:].view(-1, kv_heads, d)
    cs = cos_sin.double()[positions]
    return _rotate(q, cs, neox), _rotate(k, cs, neox), v


def cached(cache: torch.Tensor, slot: int) -> torch.Tensor:
    """The [Hkv, D] row a slot holds."""
    return cache[slot // BLOCK_SIZE, :, slot % BLOCK_SIZE]
