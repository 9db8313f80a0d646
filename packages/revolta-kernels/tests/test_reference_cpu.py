"""The pure-torch references against float64 math written independently here."""

from __future__ import annotations

import math

import pytest
import torch
from kernels_cases import FP8, dense_attention_f64, make_attn_case, rel_err

from revolta_kernels import ops, reference


@pytest.mark.parametrize("zero_centered", [False, True])
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-6), (torch.float16, 2e-3), (torch.bfloat16, 1e-2)])
def test_rms_norm(zero_centered, dtype, tol):
    x = torch.randn(7, 96, dtype=torch.float64)
    w = torch.randn(96, dtype=torch.float64)
    expect = x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-6) * (w + 1 if zero_centered else w)
    got = reference.rms_norm(x.to(dtype), w.to(dtype), 1e-6, zero_centered)
    assert got.dtype == dtype
    assert rel_err(got, expect) < tol


@pytest.mark.parametrize("zero_centered", [False, True])
def test_fused_add_rms_norm(zero_centered):
    x, r = torch.randn(5, 64, dtype=torch.float64), torch.randn(5, 64, dtype=torch.float64)
    w = torch.randn(64, dtype=torch.float64)
    s = x + r
    expect = s / torch.sqrt((s * s).mean(-1, keepdim=True) + 1e-5) * (w + 1 if zero_centered else w)
    normed, new_res = reference.fused_add_rms_norm(x.float(), r.float(), w.float(), 1e-5, zero_centered)
    assert rel_err(new_res, s) < 1e-6
    assert rel_err(normed, expect) < 1e-6


def test_silu_and_mul():
    x = torch.randn(3, 4, 2 * 48, dtype=torch.float64)
    g, u = x[..., :48], x[..., 48:]
    expect = g / (1 + torch.exp(-g)) * u
    got = ops.silu_and_mul(x.float())
    assert got.shape == (3, 4, 48)
    assert rel_err(got, expect) < 1e-6


@pytest.mark.parametrize("is_neox", [True, False])
@pytest.mark.parametrize("rot_dim", [64, 32])
def test_rotary_embedding(is_neox, rot_dim):
    t, h, hkv, d, base = 6, 4, 2, 64, 10000.0
    inv_freq = 1.0 / base ** (torch.arange(0, rot_dim, 2, dtype=torch.float64) / rot_dim)
    angles = torch.arange(50, dtype=torch.float64)[:, None] * inv_freq[None]
    cache = torch.cat((angles.cos(), angles.sin()), dim=-1)
    pos = torch.randint(0, 50, (t,))
    q, k = torch.randn(t, h, d, dtype=torch.float64), torch.randn(t, hkv, d, dtype=torch.float64)

    def rotate(x):
        out = x.clone()
        for ti in range(t):
            for i in range(rot_dim // 2):
                a = float(angles[pos[ti], i])
                i1, i2 = (i, i + rot_dim // 2) if is_neox else (2 * i, 2 * i + 1)
                x1, x2 = x[ti, :, i1], x[ti, :, i2]
                out[ti, :, i1] = x1 * math.cos(a) - x2 * math.sin(a)
                out[ti, :, i2] = x2 * math.cos(a) + x1 * math.sin(a)
        return out

    gq, gk = ops.rotary_embedding(pos, q.float(), k.float(), cache.float(), is_neox)
    assert rel_err(gq, rotate(q)) < 1e-6
    assert rel_err(gk, rotate(k)) < 1e-6
    assert torch.equal(gq[..., rot_dim:], q[..., rot_dim:].float())


@pytest.mark.parametrize("cache_dtype", [torch.float16, torch.int8, *FP8])
def test_reshape_and_cache(cache_dtype):
    t, hkv, d, bs, nb = 9, 2, 32, 4, 6
    key, value = torch.randn(t, hkv, d, dtype=torch.float64), torch.randn(t, hkv, d, dtype=torch.float64)
    kc = torch.zeros(nb, hkv, bs, d).to(cache_dtype)
    vc = torch.zeros(nb, hkv, bs, d).to(cache_dtype)
    ks = vs = None
    if cache_dtype == torch.int8:
        ks, vs = torch.zeros(nb, hkv, bs), torch.zeros(nb, hkv, bs)
    slots = torch.randperm(nb * bs)[:t]
    slots[3] = -1  # padding token: skipped
    ops.reshape_and_cache(key.half(), value.half(), kc, vc, slots, ks, vs)
    for src, cache, scales in ((key.half().double(), kc, ks), (value.half().double(), vc, vs)):
        for i, s in enumerate(slots.tolist()):
            if s < 0:
                continue
            got = reference.dequantize_kv(
                cache[s // bs, :, s % bs], None if scales is None else scales[s // bs, :, s % bs]
            ).double()
            x = src[i]
            if cache_dtype == torch.float16:
                assert torch.equal(got, x)
            elif cache_dtype == torch.int8:
                step = x.abs().amax(-1, keepdim=True) / 127
                assert ((got - x).abs() <= step / 2 + 1e-6).all()
            else:
                mant = 3 if cache_dtype == torch.float8_e4m3fn else 2
                assert ((got - x).abs() <= x.abs() * 2.0 ** -(mant + 1) + 2.0**-9).all()
    written = torch.zeros(nb * bs, dtype=torch.bool)
    written[slots[slots >= 0]] = True
    untouched = kc.permute(0, 2, 1, 3).reshape(nb * bs, hkv, d)[~written]
    assert (untouched.float() == 0).all()


@pytest.mark.parametrize("kv_dtype", [torch.float16, torch.int8, torch.float8_e4m3fn])
@pytest.mark.parametrize("heads", [(4, 4), (4, 2), (4, 1)])
def test_paged_attention_reference(kv_dtype, heads):
    case = make_attn_case(
        [5, 37, 16], [1, 4, 16], heads[0], heads[1], 32, 8, kv_dtype, q_dtype=torch.float32, seed=1
    )
    got = case.reference()
    assert rel_err(got, dense_attention_f64(case)) < 1e-5
    # the op picks decode or prefill; on the CPU both run the reference
    got_op = ops.paged_attention(*case.args())
    assert rel_err(got_op, dense_attention_f64(case)) < 1e-5


@pytest.mark.parametrize("kv_dtype", [torch.float32, torch.float16, torch.int8, torch.float8_e5m2])
@pytest.mark.parametrize("heads", [(4, 4), (6, 2), (4, 1)])
@pytest.mark.parametrize("q_lens", [[1, 1, 1], [1, 3, 8], [2, 8, 5]])
def test_cpu_short_query_path_matches_float64(kv_dtype, heads, q_lens):
    from revolta_kernels.reference.decode_attention import paged_attention_short_queries

    case = make_attn_case([9, 70, 16], q_lens, heads[0], heads[1], 32, 16, kv_dtype, q_dtype=torch.float32,
                          seed=2)
    assert rel_err(paged_attention_short_queries(*case.args()), dense_attention_f64(case)) < 1e-5


@pytest.mark.parametrize("kv_dtype", [torch.float32, torch.int8])
@pytest.mark.parametrize("q_lens", [[40, 1, 16], [3, 70, 9]])
def test_cpu_chunk_path_matches_float64(kv_dtype, q_lens):
    from revolta_kernels.reference.decode_attention import paged_attention_chunks

    case = make_attn_case([40, 70, 16], q_lens, 6, 2, 64, 8, kv_dtype, q_dtype=torch.float32, seed=3)
    assert rel_err(paged_attention_chunks(*case.args()), dense_attention_f64(case)) < 1e-5


def test_cpu_short_query_path_ignores_garbage_past_the_context():
    from revolta_kernels.reference.decode_attention import paged_attention_short_queries

    case = make_attn_case([9, 21], [1, 1], 4, 2, 32, 16, torch.float32, q_dtype=torch.float32, seed=4)
    want = dense_attention_f64(case)
    # Poison every slot that is not part of a context, and the null block 0 that padding points at.
    for cache in (case.key_cache, case.value_cache):
        cache[0] = float("nan")
        for b, ctx in enumerate(case.context_lens.tolist()):
            last = int(case.block_tables[b, (ctx - 1) // 16])
            cache[last, :, (ctx - 1) % 16 + 1:] = float("nan")
    assert rel_err(paged_attention_short_queries(*case.args()), want) < 1e-5


@pytest.mark.parametrize("ctx", [1, 16, 37])
def test_cpu_single_token_single_sequence_path(ctx):
    from revolta_kernels.reference.decode_attention import paged_attention_short_queries

    case = make_attn_case([ctx], [1], 6, 2, 32, 16, torch.float32, q_dtype=torch.float32, seed=ctx)
    assert rel_err(paged_attention_short_queries(*case.args()), dense_attention_f64(case)) < 1e-5


@pytest.mark.parametrize("slot", [0, 21, 47, -1])
def test_reshape_and_cache_single_token(slot):
    kc = torch.zeros(3, 2, 16, 8)
    vc = torch.zeros(3, 2, 16, 8)
    key, value = torch.randn(1, 2, 8), torch.randn(1, 2, 8)
    reference.reshape_and_cache(key, value, kc, vc, torch.tensor([slot]))
    if slot < 0:
        assert kc.abs().sum() == 0 and vc.abs().sum() == 0
        return
    assert torch.equal(kc[slot // 16, :, slot % 16], key[0]) and torch.equal(vc[slot // 16, :, slot % 16], value[0])
    assert kc.abs().sum() == key.abs().sum()


@pytest.mark.parametrize("cache_dtype", [torch.float32, torch.int8, torch.float8_e4m3fn])
@pytest.mark.parametrize("is_neox,rot_dim", [(True, 64), (True, 32), (False, 64)])
@pytest.mark.parametrize("t", [1, 9])
def test_rotary_and_cache_cpu_is_the_two_ops(cache_dtype, is_neox, rot_dim, t):
    """On the CPU the fused op is exactly rotary_embedding then reshape_and_cache (the engine's HF parity)."""
    h, hkv, d, bs, nb = 4, 2, 64, 8, 4
    qkv = torch.randn(t, (h + 2 * hkv) * d)
    q, k, v = qkv[:, : h * d].view(t, h, d), qkv[:, h * d : (h + hkv) * d].view(t, hkv, d), qkv[:, (h + hkv) * d :].view(t, hkv, d)
    angles = torch.rand(64, rot_dim // 2) * 10
    cs = torch.cat((angles.cos(), angles.sin()), -1)
    pos = torch.randint(0, 64, (t,))
    slots = torch.randperm(nb * bs)[:t]
    if t > 1:
        slots[2] = -1
    caches = []
    for _ in range(2):
        kc, vc = torch.zeros(nb, hkv, bs, d).to(cache_dtype), torch.zeros(nb, hkv, bs, d).to(cache_dtype)
        sc = [torch.zeros(nb, hkv, bs), torch.zeros(nb, hkv, bs)] if cache_dtype == torch.int8 else [None, None]
        caches.append((kc, vc, *sc))
    got = ops.rotary_and_cache(pos, q, k, v, cs, is_neox, caches[0][0], caches[0][1], slots, *caches[0][2:])
    rq, rk = ops.rotary_embedding(pos, q, k, cs, is_neox)
    ops.reshape_and_cache(rk, v, caches[1][0], caches[1][1], slots, *caches[1][2:])
    assert torch.equal(got, rq)
    want_ref = reference.rotary_and_cache(pos, q, k, v, cs, is_neox, *[torch.zeros_like(c) if c is not None else None
                                                                      for c in caches[1][:2]], slots,
                                          *[torch.zeros_like(c) if c is not None else None for c in caches[1][2:]])
    assert torch.allclose(want_ref, rq, atol=1e-6)
    for a, b in zip(caches[0], caches[1], strict=True):
        if a is not None:
            assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def test_argmax_op_matches_torch_on_cpu():
    x = torch.randn(3, 5, 1001)
    x[0, 0, 7] = x[0, 0].max() + 1
    x[0, 0, 9] = x[0, 0, 7]
    assert ops.argmax(x).tolist() == x.argmax(dim=-1).tolist()
    assert ops.argmax(x)[0, 0].item() == 7
    assert torch.ops.revolta.argmax(x).dtype == torch.int64


@pytest.mark.parametrize("zero_centered", [False, True])
def test_qk_norm_rotary_and_cache_is_the_separate_ops_on_cpu(zero_centered):
    """On the CPU the fused op runs exactly the separate steps (so CPU parity with transformers is untouched)."""
    t, h, hkv, d, bs = 5, 4, 2, 64, 8
    qkv = torch.randn(t, 2 * h * d + 2 * hkv * d)
    q = qkv[:, : 2 * h * d].view(t, h, 2 * d)[..., :d]  # gated layout: strided query heads
    k = qkv[:, 2 * h * d : (2 * h + hkv) * d].view(t, hkv, d)
    v = qkv[:, (2 * h + hkv) * d :].view(t, hkv, d)
    qn, kn = torch.rand(d) + 0.5, torch.randn(d)
    angles = torch.rand(64, 16) * 10
    cs = torch.cat((angles.cos(), angles.sin()), -1)  # partial rotary: 32 of 64 channels
    pos, slots = torch.tensor([3, 9, 0, 63, 5]), torch.tensor([0, 7, -1, 12, 3])
    kc1, vc1, kc2, vc2 = (torch.zeros(2, hkv, bs, d) for _ in range(4))
    got = ops.qk_norm_rotary_and_cache(pos, q, k, v, qn, kn, 1e-6, zero_centered, cs, True, kc1, vc1, slots)
    qr, kr = ops.rotary_embedding(pos, ops.rms_norm(q.contiguous(), qn, 1e-6, zero_centered),
                                  ops.rms_norm(k, kn, 1e-6, zero_centered), cs, True)
    ops.reshape_and_cache(kr, v, kc2, vc2, slots)
    assert torch.equal(got, qr) and torch.equal(kc1, kc2) and torch.equal(vc1, vc2)
    ref_q = reference.qk_norm_rotary_and_cache(pos, q, k, v, qn, kn, 1e-6, zero_centered, cs, True,
                                               torch.zeros_like(kc1), torch.zeros_like(vc1), slots)
    torch.testing.assert_close(got, ref_q)


def test_sigmoid_gate_mul_on_cpu_is_torch():
    qg = torch.randn(3, 4, 16).half()
    x = torch.randn(3, 32).half()
    want = (x.view(3, 4, 8) * torch.sigmoid(qg[..., 8:])).reshape(3, 32)
    assert torch.equal(ops.sigmoid_gate_mul(x, qg[..., 8:]), want)
    assert torch.equal(torch.ops.revolta.sigmoid_gate_mul(x, qg[..., 8:]), want)
