"""Native Gated DeltaNet and conv kernels against the pure-torch references on the same GPU inputs.

Gated delta rule (decode, recurrent prefill), causal conv1d (update, varlen prefill with snapshots), GDN
gating, gated RMSNorm, and a hybrid model's decode ops replayed in a CUDA graph (the MoE kernels: test_moe_gpu.py).
Every check draws fresh random inputs, poisons freed allocator blocks with NaN (an unwritten output shows), and
states its bound as relative L2 error ||native - ref|| / ||ref||: fp32 math on both sides, so the bound is the
storage type's rounding (fp16 2e-3, bf16 1e-2, fp32 1e-4 -- the prefill reference is the chunked UT form, the
kernel the recurrent form, so fp32 agrees to summation order only).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from kernels_cases import poison_allocator, rel_err
from moe_cases import DTYPES, TOL, cuda_gen, experts

import revolta_kernels
from revolta_kernels import ops_gdn, ops_moe
from revolta_kernels.reference import conv1d as ref_conv
from revolta_kernels.reference import gdn as ref_gdn

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(not revolta_kernels.native_available(), reason=revolta_kernels.native_status()),
]

def _qkv(n, hk, hv, dk, dv, dtype, gen):
    """q/k/v as strided views of one fused projection, like the layer's conv output."""
    fused = torch.randn(n, 2 * hk * dk + hv * dv + 8, device="cuda", generator=gen).to(dtype)
    q = fused[:, : hk * dk].view(n, hk, dk)
    k = fused[:, hk * dk : 2 * hk * dk].view(n, hk, dk)
    v = fused[:, 2 * hk * dk : 2 * hk * dk + hv * dv].view(n, hv, dv)
    g = -F.softplus(torch.randn(n, hv, device="cuda", generator=gen)) * 0.5
    beta = torch.sigmoid(torch.randn(n, hv, device="cuda", generator=gen)).to(dtype)
    return q, k, v, g, beta


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("batch", "hk", "hv", "dk", "dv"), [(32, 16, 32, 128, 128), (3, 2, 4, 64, 64),
                                                            (5, 4, 4, 128, 192), (300, 2, 2, 128, 64)])
@pytest.mark.parametrize("l2norm", [True, False])
def test_gdn_decode(dtype, batch, hk, hv, dk, dv, l2norm):
    gen = cuda_gen(batch * dk + dv)
    q, k, v, g, beta = _qkv(batch, hk, hv, dk, dv, dtype, gen)
    pool = torch.randn(batch + 7, hv, dk, dv, device="cuda", generator=gen) * 0.3
    slots = torch.randperm(batch + 7, device="cuda", generator=gen)[:batch]
    want_pool = pool.clone()
    want = ref_gdn.gated_delta_rule_recurrent(q, k, v, g, beta, want_pool, slots, l2norm)
    poison_allocator()
    got = ops_gdn.gated_delta_rule_decode(q, k, v, g, beta, pool, slots, l2norm)
    assert got.dtype == dtype and got.shape == (batch, hv, dv)
    assert rel_err(got, want) < TOL[dtype]
    assert rel_err(pool, want_pool) < 1e-5  # fp32 state, untouched slots equal


def test_gdn_decode_padding_slot_writes_nothing():
    from revolta_kernels import native_gdn

    gen = cuda_gen(7)
    q, k, v, g, beta = _qkv(3, 2, 4, 128, 128, torch.float16, gen)
    pool = torch.randn(4, 4, 128, 128, device="cuda", generator=gen)
    before = pool.clone()
    idx = torch.tensor([1, -1, 2], device="cuda")
    out = native_gdn.gated_delta_rule_decode(q, k, v, g, beta, pool, idx, True)
    assert torch.equal(out[1], torch.zeros_like(out[1]))
    assert torch.equal(pool[0], before[0]) and torch.equal(pool[3], before[3])
    assert not torch.equal(pool[1], before[1])
    pool.copy_(before)
    a, b = torch.randn(2, 3, 4, device="cuda", generator=gen).half()
    z = torch.randn(3, 4, 128, device="cuda", generator=gen).half()
    ones = torch.ones(4, device="cuda").half()
    out = native_gdn.gated_delta_rule_decode_fused(q, k, v, a, b, ones, ones, z, torch.ones(128, device="cuda").half(),
                                                   1e-6, pool, idx, True)
    assert torch.equal(out[1], torch.zeros_like(out[1]))
    assert torch.equal(pool[0], before[0]) and torch.equal(pool[3], before[3])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("batch", "hk", "hv", "dk"),
                         [(1, 16, 32, 128), (2, 16, 32, 128), (32, 16, 32, 128), (7, 2, 6, 64)])
def test_gdn_decode_fused_is_gating_delta_rule_and_gated_norm(dtype, batch, hk, hv, dk):
    gen = cuda_gen(100 + batch + dk)
    dv = 128
    q, k, v, _, _ = _qkv(batch, hk, hv, dk, dv, dtype, gen)
    proj = torch.randn(batch, hv * dv + 2 * hv + 8, device="cuda", generator=gen).to(dtype)
    z = proj[:, : hv * dv].view(batch, hv, dv)  # strided views of one projection, as in the layer
    b, a = proj[:, hv * dv : hv * dv + hv], proj[:, hv * dv + hv : hv * dv + 2 * hv]
    a_log = (torch.rand(hv, device="cuda", generator=gen) * 3 - 4).to(dtype)
    dt_bias = torch.randn(hv, device="cuda", generator=gen).to(dtype)
    w = (torch.rand(dv, device="cuda", generator=gen) + 0.5).to(dtype)
    pool = torch.randn(batch + 3, hv, dk, dv, device="cuda", generator=gen) * 0.3
    slots = torch.randperm(batch + 3, device="cuda", generator=gen)[:batch]
    want_pool = pool.clone()
    want = ref_gdn.gated_delta_rule_decode_fused(q, k, v, a, b, a_log, dt_bias, z, w, 1e-6, want_pool, slots, True)
    poison_allocator()
    got = ops_gdn.gated_delta_rule_decode_fused(q, k, v, a, b, a_log, dt_bias, z, w, 1e-6, pool, slots, True)
    assert got.dtype == dtype and got.shape == (batch, hv, dv)
    assert rel_err(got, want) < 2 * TOL[dtype]  # two roundings to the storage type on each side
    assert rel_err(pool, want_pool) < 1e-5
    # a second step on the updated states (the kernel's arrival counters must have re-armed)
    q2, k2, v2, _, _ = _qkv(batch, hk, hv, dk, dv, dtype, gen)
    want2 = ref_gdn.gated_delta_rule_decode_fused(q2, k2, v2, a, b, a_log, dt_bias, z, w, 1e-6, want_pool, slots,
                                                  True)
    poison_allocator()
    got2 = ops_gdn.gated_delta_rule_decode_fused(q2, k2, v2, a, b, a_log, dt_bias, z, w, 1e-6, pool, slots, True)
    assert rel_err(got2, want2) < 2 * TOL[dtype]
    assert rel_err(pool, want_pool) < 1e-5


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("batch", "hk", "hv", "dk", "width"),
                         [(1, 16, 32, 128, 4), (2, 16, 32, 128, 4), (5, 2, 6, 64, 3), (3, 4, 4, 128, 2)])
def test_gdn_decode_fused_conv_is_conv_update_then_fused_step(dtype, batch, hk, hv, dk, width):
    """The fused kernel with the conv folded in against the reference conv update + fused step (two steps)."""
    gen = cuda_gen(300 + batch + dk + width)
    dv = 128
    conv_dim = 2 * hk * dk + hv * dv
    w = (torch.rand(dv, device="cuda", generator=gen) + 0.5).to(dtype)
    a_log = (torch.rand(hv, device="cuda", generator=gen) * 3 - 4).to(dtype)
    dt_bias = torch.randn(hv, device="cuda", generator=gen).to(dtype)
    conv_w = (torch.randn(conv_dim, width, device="cuda", generator=gen) * 0.5).to(dtype)
    pool = torch.randn(batch + 3, hv, dk, dv, device="cuda", generator=gen) * 0.3
    conv_pool = torch.randn(batch + 3, conv_dim, width - 1, device="cuda", generator=gen).to(dtype)
    slots = torch.randperm(batch + 3, device="cuda", generator=gen)[:batch]
    want_pool, want_conv = pool.clone(), conv_pool.clone()
    for step in range(2):  # the second step checks the re-armed arrival counters and the shifted conv states
        proj = torch.randn(batch, conv_dim + hv * dv + 2 * hv + 8, device="cuda", generator=gen).to(dtype)
        qkv = proj[:, :conv_dim]  # strided views of one projection, as in the layer
        z = proj[:, conv_dim : conv_dim + hv * dv].view(batch, hv, dv)
        b = proj[:, conv_dim + hv * dv : conv_dim + hv * dv + hv]
        a = proj[:, conv_dim + hv * dv + hv : conv_dim + hv * dv + 2 * hv]
        want = ref_gdn.gated_delta_rule_decode_fused_conv(qkv, conv_w, want_conv, a, b, a_log, dt_bias, z, w, 1e-6,
                                                          want_pool, slots, True)
        poison_allocator()
        got = ops_gdn.gated_delta_rule_decode_fused_conv(qkv, conv_w, conv_pool, a, b, a_log, dt_bias, z, w,
                                                            1e-6, pool, slots, True)
        assert got.dtype == dtype and got.shape == (batch, hv, dv), step
        assert rel_err(got, want) < 3 * TOL[dtype], step  # conv output, delta rule output, norm: 3 roundings
        # the conv outputs may round differently (summation order), which the states carry: the storage bound
        assert rel_err(pool, want_pool) < (1e-5 if dtype == torch.float32 else TOL[dtype]), step
        assert torch.equal(conv_pool, want_conv), step  # the shifted inputs are copies


def test_gdn_decode_fused_conv_padding_slot():
    from revolta_kernels import native_gdn

    gen = cuda_gen(77)
    hk, hv, dk, dv, width = 2, 4, 128, 128, 4
    conv_dim = 2 * hk * dk + hv * dv
    pool = torch.randn(4, hv, dk, dv, device="cuda", generator=gen)
    conv_pool = torch.randn(4, conv_dim, width - 1, device="cuda", generator=gen).half()
    before, conv_before = pool.clone(), conv_pool.clone()
    idx = torch.tensor([1, -1, 2], device="cuda")
    proj = torch.randn(3, conv_dim + hv * dv + 2 * hv, device="cuda", generator=gen).half()
    qkv, z = proj[:, :conv_dim], proj[:, conv_dim : conv_dim + hv * dv].view(3, hv, dv)
    b, a = proj[:, conv_dim + hv * dv : conv_dim + hv * dv + hv], proj[:, conv_dim + hv * dv + hv :]
    ones = torch.ones(hv, device="cuda").half()
    conv_w = torch.randn(conv_dim, width, device="cuda", generator=gen).half()
    out = native_gdn.gated_delta_rule_decode_fused_conv(qkv, conv_w, conv_pool, a, b, ones, ones, z,
                                                           torch.ones(dv, device="cuda").half(), 1e-6, pool, idx, True)
    assert torch.equal(out[1], torch.zeros_like(out[1]))
    assert torch.equal(pool[0], before[0]) and torch.equal(pool[3], before[3])
    assert torch.equal(conv_pool[0], conv_before[0]) and torch.equal(conv_pool[3], conv_before[3])
    assert not torch.equal(conv_pool[1], conv_before[1]) and not torch.equal(pool[2], before[2])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("hk", "hv", "dk", "dv"), [(2, 4, 128, 128), (2, 2, 64, 48)])
def test_gdn_prefill_varlen_with_snapshots(dtype, hk, hv, dk, dv):
    gen = cuda_gen(dk + dv)
    lens = [1, 37, 0, 64, 200, 5]
    n = sum(lens)
    q, k, v, g, beta = _qkv(n, hk, hv, dk, dv, dtype, gen)
    qsl = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
    pool = torch.randn(12, hv, dk, dv, device="cuda", generator=gen) * 0.3
    slots = torch.tensor([3, 0, 7, 1, 5, 2], device="cuda")
    # (sequence, new tokens, slot): unsorted, one at 0 tokens, two on the same sequence
    snap_seq, snap_len, snap_slot = (torch.tensor(c, device="cuda") for c in
                                     ([4, 1, 4, 3, 1], [160, 16, 32, 0, 37], [8, 9, 10, 11, 6]))
    want_pool = pool.clone()
    want = ref_gdn.gated_delta_rule_chunked(q, k, v, g, beta, want_pool, qsl, slots, True, snap_seq, snap_len,
                                            snap_slot)
    poison_allocator()
    got = ops_gdn.gated_delta_rule_prefill(q, k, v, g, beta, pool, qsl, slots, True, snap_seq, snap_len,
                                              snap_slot)
    assert got.shape == (n, hv, dv)
    assert rel_err(got, want) < TOL[dtype]
    for slot in range(pool.shape[0]):
        assert rel_err(pool[slot], want_pool[slot]) < 1e-4, f"slot {slot}"


def test_gdn_prefill_long_sequence_matches_chunked_reference():
    gen = cuda_gen(11)
    q, k, v, g, beta = _qkv(4096, 4, 8, 128, 128, torch.float16, gen)
    pool = torch.zeros(2, 8, 128, 128, device="cuda")
    want_pool = pool.clone()
    qsl = torch.tensor([0, 4096], dtype=torch.int32, device="cuda")
    idx = torch.tensor([1], device="cuda")
    empty = torch.zeros(0, dtype=torch.int64, device="cuda")
    want = ref_gdn.gated_delta_rule_chunked(q, k, v, g, beta, want_pool, qsl, idx, True, empty, empty, empty)
    got = ops_gdn.gated_delta_rule_prefill(q, k, v, g, beta, pool, qsl, idx, True, empty, empty, empty)
    assert rel_err(got, want) < TOL[torch.float16]
    assert rel_err(pool, want_pool) < 1e-4


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("width", [4, 2])
@pytest.mark.parametrize("bias", [False, True])
def test_conv1d_update(dtype, width, bias):
    gen = cuda_gen(width + 10 * bias)
    b, c = 7, 1000
    x = torch.randn(b, c + 24, device="cuda", generator=gen).to(dtype)[:, 8 : 8 + c]  # strided rows
    w = torch.randn(c, width, device="cuda", generator=gen).to(dtype)
    bv = torch.randn(c, device="cuda", generator=gen).to(dtype) if bias else None
    pool = torch.randn(10, c, width - 1, device="cuda", generator=gen).to(dtype)
    slots = torch.tensor([9, 0, 4, 2, 7, 1, 5], device="cuda")
    want_pool = pool.clone()
    want = ref_conv.causal_conv1d_update(x, w, bv, want_pool, slots, True)
    poison_allocator()
    got = ops_gdn.causal_conv1d_update(x, w, bv, pool, slots, True)
    assert rel_err(got, want) < TOL[dtype]
    assert torch.equal(pool, want_pool)  # the state is a shift of stored values


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bias", [False, True])
def test_conv1d_prefill_varlen_with_snapshots(dtype, bias):
    gen = cuda_gen(20 + bias)
    c, width = 520, 4
    lens = [2, 0, 1, 40, 17, 3]
    n = sum(lens)
    x = torch.randn(n, c, device="cuda", generator=gen).to(dtype)
    w = torch.randn(c, width, device="cuda", generator=gen).to(dtype)
    bv = torch.randn(c, device="cuda", generator=gen).to(dtype) if bias else None
    pool = torch.randn(12, c, width - 1, device="cuda", generator=gen).to(dtype)
    qsl = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
    slots = torch.tensor([0, 1, 2, 3, 4, 5], device="cuda")
    snap_seq, snap_len, snap_slot = (torch.tensor(col, device="cuda") for col in
                                     ([3, 0, 3, 4], [32, 1, 16, 17], [6, 7, 8, 9]))
    want_pool = pool.clone()
    want = ref_conv.causal_conv1d(x, w, bv, want_pool, qsl, slots, True, snap_seq, snap_len, snap_slot)
    poison_allocator()
    got = ops_gdn.causal_conv1d(x, w, bv, pool, qsl, slots, True, snap_seq, snap_len, snap_slot)
    assert rel_err(got, want) < TOL[dtype]
    assert torch.equal(pool, want_pool)


@pytest.mark.parametrize("dtype", DTYPES)
def test_gdn_gating_and_gated_rms_norm(dtype):
    gen = cuda_gen(30)
    t, h, d = 9, 32, 128
    proj = torch.randn(t, 3 * h + h * d, device="cuda", generator=gen).to(dtype) * 4
    a, b = proj[:, :h], proj[:, h : 2 * h]
    a_log = (torch.rand(h, device="cuda", generator=gen) * 3 - 4).to(dtype)
    dt_bias = torch.randn(h, device="cuda", generator=gen).to(dtype)
    poison_allocator()
    g, beta = ops_gdn.gdn_gating(a, b, a_log, dt_bias)
    want_g, want_beta = ref_gdn.gdn_gating(a, b, a_log, dt_bias)
    assert g.dtype == torch.float32 and beta.dtype == dtype
    assert rel_err(g, want_g) < 1e-5 and rel_err(beta, want_beta) < TOL[dtype]
    x = torch.randn(t, h, d, device="cuda", generator=gen).to(dtype)
    z = proj[:, 3 * h :].reshape(t, h, d)  # strided rows, as the layer passes its gate projection
    w = torch.randn(d, device="cuda", generator=gen).to(dtype)
    poison_allocator()
    got = ops_gdn.rms_norm_gated(x, z, w, 1e-6)
    assert rel_err(got, ref_gdn.rms_norm_gated(x, z, w, 1e-6)) < TOL[dtype]


def test_decode_ops_replay_in_a_cuda_graph():
    """Conv update + gating + delta rule + gated norm + MoE block captured once, replayed on new inputs."""
    gen = cuda_gen(60)
    bsz, hk, hv, d, e, h = 4, 2, 4, 128, 32, 256
    conv_dim = 2 * hk * d + hv * d
    w = torch.randn(conv_dim, 4, device="cuda", generator=gen).half()
    conv_pool = torch.zeros(6, conv_dim, 3, device="cuda").half()
    rec_pool = torch.zeros(6, hv, d, d, device="cuda")
    w13, w2 = experts(e, h, 64, torch.float16, gen)
    wr = (torch.randn(e, h, device="cuda", generator=gen) / h**0.5).half()
    a_log, dt_bias = torch.zeros(hv, device="cuda").half(), torch.zeros(hv, device="cuda").half()
    static_x = torch.zeros(bsz, conv_dim + 2 * hv, device="cuda").half()
    static_h = torch.zeros(bsz, h, device="cuda").half()
    static_logits = torch.zeros(bsz, e, device="cuda").half()
    slots = torch.tensor([4, 1, 0, 3], device="cuda")

    def step(x, hid, logits, conv, rec):
        qkv = ops_gdn.causal_conv1d_update(x[:, :conv_dim], w, None, conv, slots, True)
        g, beta = ops_gdn.gdn_gating(x[:, conv_dim : conv_dim + hv], x[:, conv_dim + hv :], a_log, dt_bias)
        q = qkv[:, : hk * d].view(bsz, hk, d)
        k = qkv[:, hk * d : 2 * hk * d].view(bsz, hk, d)
        v = qkv[:, 2 * hk * d :].view(bsz, hv, d)
        o = ops_gdn.gated_delta_rule_decode(q, k, v, g, beta, rec, slots, True)
        o = ops_gdn.rms_norm_gated(o, v, torch.ones(d, device="cuda").half(), 1e-6)
        o2 = ops_gdn.gated_delta_rule_decode_fused(q, k, v, x[:, conv_dim : conv_dim + hv], x[:, conv_dim + hv :],
                                                   a_log, dt_bias, v, torch.ones(d, device="cuda").half(), 1e-6,
                                                   rec, slots, True)
        routed = ops_moe.moe_block(hid, ops_moe.moe_router(hid, wr), w13, w2, 4, True, None, None, None)
        return o + o2, ops_moe.moe_block(hid, logits, w13, w2, 4, True, None, None, None) + routed

    step(static_x, static_h, static_logits, conv_pool, rec_pool)  # warm-up outside the graph
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = step(static_x, static_h, static_logits, conv_pool, rec_pool)
    ref_conv_pool, ref_rec_pool = conv_pool.clone(), rec_pool.clone()
    for i in range(3):
        x = torch.randn(bsz, conv_dim + 2 * hv, device="cuda", generator=gen).half()
        hid = torch.randn(bsz, h, device="cuda", generator=gen).half()
        logits = torch.randn(bsz, e, device="cuda", generator=gen).half()
        static_x.copy_(x)
        static_h.copy_(hid)
        static_logits.copy_(logits)
        graph.replay()
        want = step(x, hid, logits, ref_conv_pool, ref_rec_pool)
        assert torch.equal(outs[0], want[0]) and torch.equal(outs[1], want[1]), f"replay {i}"
    assert torch.equal(rec_pool, ref_rec_pool) and torch.equal(conv_pool, ref_conv_pool)
