"""Native CUDA kernels against the pure-torch reference on the same GPU inputs: norms, activations, rotary and
the KV-cache writes (paged attention: test_attention_gpu.py).

Every check draws fresh random inputs, poisons the memory the output will land in (NaN-filled allocator
blocks, NaN-filled caches), and states its error bound: relative L2 error ||native - ref|| / ||ref||.
"""

from __future__ import annotations

import pytest
import torch
from kernels_cases import FP8, NATIVE_GPU, poison_allocator, rel_err

from revolta_kernels import ops, reference

pytestmark = NATIVE_GPU

DT_TOL = {torch.float16: 1e-3, torch.bfloat16: 8e-3, torch.float32: 1e-5}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("hidden", [64, 1000, 4096])
@pytest.mark.parametrize("zero_centered", [False, True])
def test_rms_norms(dtype, hidden, zero_centered):
    x = torch.randn(37, hidden, device="cuda").to(dtype)
    r = torch.randn(37, hidden, device="cuda").to(dtype)
    w = (torch.rand(hidden, device="cuda") + 0.5).to(dtype)
    poison_allocator()
    assert (
        rel_err(ops.rms_norm(x, w, 1e-6, zero_centered), reference.rms_norm(x, w, 1e-6, zero_centered))
        < DT_TOL[dtype]
    )
    poison_allocator()
    out, res = ops.fused_add_rms_norm(x, r, w, 1e-6, zero_centered)
    ref_out, ref_res = reference.fused_add_rms_norm(x, r, w, 1e-6, zero_centered)
    assert rel_err(res, ref_res) < DT_TOL[dtype]
    assert rel_err(out, ref_out) < DT_TOL[dtype]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("shape", [(5, 2 * 11008), (3, 7, 2 * 96)])
def test_silu_and_mul(dtype, shape):
    x = (torch.randn(shape, device="cuda") * 3).to(dtype)
    poison_allocator()
    assert rel_err(ops.silu_and_mul(x), reference.silu_and_mul(x)) < DT_TOL[dtype]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("is_neox", [True, False])
@pytest.mark.parametrize("head_dim,rot_dim", [(128, 128), (128, 64), (64, 32)])
@pytest.mark.parametrize("cache_dtype", ["same", "float32"])
def test_rotary(dtype, is_neox, head_dim, rot_dim, cache_dtype):
    t, h, hkv = 29, 8, 2
    qkv = torch.randn(t, (h + 2 * hkv) * head_dim, device="cuda").to(dtype)
    q = qkv[:, : h * head_dim].view(t, h, head_dim)  # strided views, as an engine slices a fused qkv
    k = qkv[:, h * head_dim : (h + hkv) * head_dim].view(t, hkv, head_dim)
    angles = torch.rand(4096, rot_dim // 2, device="cuda") * 100
    cs = torch.cat((angles.cos(), angles.sin()), -1)
    cs = cs if cache_dtype == "float32" else cs.to(dtype)
    pos = torch.randint(0, 4096, (t,), device="cuda")
    poison_allocator()
    gq, gk = ops.rotary_embedding(pos, q, k, cs, is_neox)
    rq, rk = reference.rotary_embedding(pos, q, k, cs, is_neox)
    assert rel_err(gq, rq) < DT_TOL[dtype] and rel_err(gk, rk) < DT_TOL[dtype]


@pytest.mark.parametrize("src_dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("cache_dtype", ["same", torch.int8, *FP8])
@pytest.mark.parametrize("block_size", [16, 32])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_reshape_and_cache(src_dtype, cache_dtype, block_size, head_dim):
    t, hkv, nb = 50, 4, 9
    cdt = src_dtype if cache_dtype == "same" else cache_dtype
    kv = torch.randn(t, 2 * hkv, head_dim, device="cuda").to(src_dtype)
    key, value = kv[:, :hkv], kv[:, hkv:]
    slots = torch.randperm(nb * block_size, device="cuda")[:t]
    slots[::7] = -1
    caches = []
    for _ in range(2):  # native, reference
        kc = torch.full((nb, hkv, block_size, head_dim), float("nan"), device="cuda").to(cdt)
        vc = torch.full_like(kc, float("nan")) if cdt != torch.int8 else torch.full_like(kc, -128)
        if cdt == torch.int8:
            kc.fill_(-128)
        sc = (
            [torch.full((nb, hkv, block_size), float("nan"), device="cuda") for _ in range(2)]
            if cdt == torch.int8
            else [None, None]
        )
        caches.append((kc, vc, *sc))
    ops.reshape_and_cache(key, value, caches[0][0], caches[0][1], slots, caches[0][2], caches[0][3])
    reference.reshape_and_cache(key, value, caches[1][0], caches[1][1], slots, caches[1][2], caches[1][3])
    for got, want in zip(caches[0], caches[1], strict=True):
        if got is None:
            continue
        if got.dtype == torch.int8:
            # torch divides by a scalar as a multiply by its reciprocal, so scales can differ by an ulp and
            # a value near a rounding tie by one step
            assert (got.int() - want.int()).abs().max() <= 1
        elif got.dtype == torch.float32:
            assert torch.allclose(got, want, rtol=1e-6, atol=0, equal_nan=True)
        else:  # bit-identical, NaN in untouched slots included
            assert torch.equal(got.view(torch.uint8), want.view(torch.uint8))


def _poisoned_cache(cdt, nb, hkv, bs, head_dim):
    """(key cache, value cache, k scales, v scales) of ``nb`` blocks, every byte poisoned (scales only for int8)."""
    if cdt == torch.int8:
        kc, vc = (torch.full((nb, hkv, bs, head_dim), -128, dtype=torch.int8, device="cuda") for _ in range(2))
        return kc, vc, *(torch.full((nb, hkv, bs), float("nan"), device="cuda") for _ in range(2))
    kc, vc = (torch.full((nb, hkv, bs, head_dim), float("nan"), device="cuda").to(cdt) for _ in range(2))
    return kc, vc, None, None


def _check_cache_writes(got_cache, want_cache, slots, dtype):
    """The native cache write equals the reference's in the written slots; the other slots keep their poison."""
    nb, hkv, bs = got_cache[0].shape[:3]
    written = torch.zeros(nb * bs, dtype=torch.bool, device="cuda")
    written[slots[slots >= 0]] = True
    written = written.view(nb, 1, bs).expand(nb, hkv, bs)
    for got, want in zip(got_cache, want_cache, strict=True):
        if got is None:
            continue
        # untouched slots keep their poison bit for bit
        assert torch.equal(got[~written].view(torch.uint8), want[~written].view(torch.uint8))
        g, w = got[written], want[written]
        if got.dtype == torch.int8:
            # a normed / rotated k can differ from the reference's by an ulp (fused multiply-adds), so a value
            # near a rounding tie can move by one step
            assert (g.int() - w.int()).abs().max() <= 1
        elif got.dtype == torch.float32:  # int8 scales
            assert torch.allclose(g, w, rtol=1e-2, atol=0)
        else:
            assert rel_err(g.float(), w.float()) < (DT_TOL[dtype] if got.dtype == dtype else 3e-2)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("cache_dtype", ["same", torch.int8, *FP8])
@pytest.mark.parametrize("is_neox", [True, False])
@pytest.mark.parametrize("head_dim,rot_dim,h,hkv", [(128, 128, 32, 8), (128, 64, 8, 2), (256, 64, 16, 2), (64, 64, 4, 4)])
def test_rotary_and_cache(dtype, cache_dtype, is_neox, head_dim, rot_dim, h, hkv):
    """The fused op against rotary_embedding + reshape_and_cache (the reference), strided q/k/v views of one
    fused qkv tensor as the engine passes them, padding slots skipped."""
    t, bs, nb = 37, 16, 6
    cdt = dtype if cache_dtype == "same" else cache_dtype
    qkv = torch.randn(t, (h + 2 * hkv) * head_dim, device="cuda").to(dtype)
    q = qkv[:, : h * head_dim].view(t, h, head_dim)
    k = qkv[:, h * head_dim : (h + hkv) * head_dim].view(t, hkv, head_dim)
    v = qkv[:, (h + hkv) * head_dim :].view(t, hkv, head_dim)
    angles = torch.rand(4096, rot_dim // 2, device="cuda") * 100
    cs = torch.cat((angles.cos(), angles.sin()), -1)
    pos = torch.randint(0, 4096, (t,), device="cuda")
    slots = torch.randperm(nb * bs, device="cuda")[:t]
    slots[::5] = -1
    caches = [_poisoned_cache(cdt, nb, hkv, bs, head_dim) for _ in range(2)]  # native, reference
    poison_allocator()
    got_q = ops.rotary_and_cache(pos, q, k, v, cs, is_neox, *caches[0][:2], slots, *caches[0][2:])
    want_q = reference.rotary_and_cache(pos, q, k, v, cs, is_neox, *caches[1][:2], slots, *caches[1][2:])
    assert got_q.shape == (t, h, head_dim) and got_q.is_contiguous()
    assert rel_err(got_q, want_q) < DT_TOL[dtype]
    _check_cache_writes(caches[0], caches[1], slots, dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("cache_dtype", ["same", torch.int8, torch.float8_e4m3fn])
@pytest.mark.parametrize("zero_centered", [False, True])
@pytest.mark.parametrize("gated", [False, True])
@pytest.mark.parametrize("head_dim,rot_dim,h,hkv", [(128, 128, 32, 8), (256, 64, 16, 2), (64, 32, 4, 4)])
def test_qk_norm_rotary_and_cache(dtype, cache_dtype, zero_centered, gated, head_dim, rot_dim, h, hkv):
    """Per-head q/k RMSNorm + rotary + cache write in one op against the reference (rms_norm of q and k, then
    rotary_and_cache), on strided views of one fused projection: Qwen3's [q | k | v] and Qwen3.5's gated
    attention (each query head followed by its output gate, so the query head stride is 2 * head_dim)."""
    t, bs, nb = 29, 16, 4
    cdt = dtype if cache_dtype == "same" else cache_dtype
    qw = h * head_dim * (2 if gated else 1)
    qkv = (torch.randn(t, qw + 2 * hkv * head_dim, device="cuda") * 3).to(dtype)
    q = qkv[:, :qw].view(t, h, -1)[..., :head_dim]
    k = qkv[:, qw : qw + hkv * head_dim].view(t, hkv, head_dim)
    v = qkv[:, qw + hkv * head_dim :].view(t, hkv, head_dim)
    qn = (torch.rand(head_dim, device="cuda") + 0.5).to(dtype)
    kn = (torch.randn(head_dim, device="cuda") * 0.3).to(dtype)
    angles = torch.rand(4096, rot_dim // 2, device="cuda") * 100
    cs = torch.cat((angles.cos(), angles.sin()), -1)
    pos = torch.randint(0, 4096, (t,), device="cuda")
    slots = torch.randperm(nb * bs, device="cuda")[:t]
    slots[::4] = -1
    caches = [_poisoned_cache(cdt, nb, hkv, bs, head_dim) for _ in range(2)]  # native, reference
    poison_allocator()
    args = (qn, kn, 1e-6, zero_centered, cs, True)
    got_q = ops.qk_norm_rotary_and_cache(pos, q, k, v, *args, *caches[0][:2], slots, *caches[0][2:])
    want_q = reference.qk_norm_rotary_and_cache(pos, q, k, v, *args, *caches[1][:2], slots, *caches[1][2:])
    assert got_q.shape == (t, h, head_dim) and got_q.is_contiguous()
    assert rel_err(got_q, want_q) < DT_TOL[dtype]
    _check_cache_writes(caches[0], caches[1], slots, dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("t,h,d", [(1, 16, 256), (7, 32, 128), (300, 4, 64)])
def test_sigmoid_gate_mul(dtype, t, h, d):
    """x * sigmoid(gate) against torch on the gated-attention layout (gate heads interleaved with q heads)."""
    qg = (torch.randn(t, h, 2 * d, device="cuda") * 4).to(dtype)
    gate = qg[..., d:]
    x = torch.randn(t, h * d, device="cuda").to(dtype)
    poison_allocator()
    got = ops.sigmoid_gate_mul(x, gate)
    want = (x.view(t, h, d) * torch.sigmoid(gate)).reshape(t, h * d)
    assert got.shape == (t, h * d)
    assert rel_err(got, want) < DT_TOL[dtype]
