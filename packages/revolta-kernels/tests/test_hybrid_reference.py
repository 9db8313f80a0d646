"""References of the hybrid/MoE ops (revolta_kernels.ops_hybrid) against float64 math written here."""

from __future__ import annotations

import pytest
import torch
from kernels_cases import rel_err

from revolta_kernels import ops_hybrid


@pytest.mark.parametrize("renormalize", [True, False])
def test_moe_routing_and_experts(renormalize):
    gen = torch.Generator().manual_seed(0)
    t, h, inter, e, k = 9, 16, 12, 6, 2
    x = torch.randn(t, h, generator=gen, dtype=torch.float64)
    w13 = torch.randn(e, 2 * inter, h, generator=gen, dtype=torch.float64) / 4
    w2 = torch.randn(e, h, inter, generator=gen, dtype=torch.float64) / 4
    logits = torch.randn(t, e, generator=gen, dtype=torch.float64)
    weights, ids = ops_hybrid.moe_topk_softmax(logits.float(), k, renormalize)
    out = ops_hybrid.fused_moe(x.float(), w13.float(), w2.float(), weights, ids)
    expect = torch.zeros(t, h, dtype=torch.float64)
    for i in range(t):
        p = torch.exp(logits[i]) / torch.exp(logits[i]).sum()
        top = sorted(range(e), key=lambda j: -float(p[j]))[:k]
        assert sorted(ids[i].tolist()) == sorted(top)
        total = sum(float(p[j]) for j in top) if renormalize else 1.0
        for j in top:
            gate, up = w13[j, :inter] @ x[i], w13[j, inter:] @ x[i]
            act = gate / (1 + torch.exp(-gate)) * up
            expect[i] += float(p[j]) / total * (w2[j] @ act)
    assert rel_err(out, expect) < 1e-5


def _conv_f64(x, w, state):
    """x [n, C], w [C, K], state [C, K-1] -> (silu(conv) [n, C], new state)."""
    full = torch.cat([state, x.t()], dim=1)
    kk = w.shape[1]
    y = torch.stack([(full[:, t:t + kk] * w).sum(-1) for t in range(x.shape[0])])
    return y / (1 + torch.exp(-y)), full[:, -(kk - 1):]


def test_causal_conv1d_varlen_update_and_snapshots():
    gen = torch.Generator().manual_seed(1)
    c, kk, lens = 10, 4, [5, 1, 17]
    w = torch.randn(c, kk, generator=gen, dtype=torch.float64)
    xs = [torch.randn(n, c, generator=gen, dtype=torch.float64) for n in lens]
    states = torch.randn(6, c, kk - 1, generator=gen, dtype=torch.float64)
    slots = [4, 0, 2]
    pool = states.float().clone()
    qsl = torch.tensor([0, 5, 6, 23], dtype=torch.int32)
    out = ops_hybrid.causal_conv1d(torch.cat(xs).float(), w.float(), None, pool, qsl, torch.tensor(slots), True,
                                   torch.tensor([2]), torch.tensor([16]), torch.tensor([5]))
    for i, (x, slot) in enumerate(zip(xs, slots, strict=True)):
        y, new_state = _conv_f64(x, w, states[slot])
        assert rel_err(out[qsl[i]:qsl[i + 1]], y) < 1e-5
        assert rel_err(pool[slot], new_state) < 1e-6
    _, snap = _conv_f64(xs[2][:16], w, states[2])
    assert rel_err(pool[5], snap) < 1e-6
    # single-token update path agrees with the varlen path
    x1 = torch.randn(2, c, generator=gen, dtype=torch.float64)
    before = pool.clone().double()
    y = ops_hybrid.causal_conv1d_update(x1.float(), w.float(), None, pool, torch.tensor([4, 2]), True)
    for row, slot in enumerate([4, 2]):
        expect, new_state = _conv_f64(x1[row:row + 1], w, before[slot])
        assert rel_err(y[row], expect[0]) < 1e-5
        assert rel_err(pool[slot], new_state) < 1e-6


def _gdn_f64(q, k, v, g, beta, state):
    """Token-by-token gated delta rule in float64: q/k [n, Hk, Dk], v [n, Hv, Dv], state [Hv, Dk, Dv]."""
    rep = v.shape[1] // q.shape[1]
    outs = []
    s = state.clone()
    for t in range(q.shape[0]):
        o_t = []
        for hv in range(v.shape[1]):
            qt, kt = q[t, hv // rep], k[t, hv // rep]
            qt, kt = qt / torch.sqrt((qt * qt).sum() + 1e-6), kt / torch.sqrt((kt * kt).sum() + 1e-6)
            qt = qt / qt.shape[0] ** 0.5
            s[hv] = s[hv] * torch.exp(g[t, hv])
            s[hv] = s[hv] + torch.outer(kt, beta[t, hv] * (v[t, hv] - s[hv].t() @ kt))
            o_t.append(s[hv].t() @ qt)
        outs.append(torch.stack(o_t))
    return torch.stack(outs), s


def _gdn_inputs(gen, n, hk, hv, dk, dv):
    q = torch.randn(n, hk, dk, generator=gen, dtype=torch.float64)
    k = torch.randn(n, hk, dk, generator=gen, dtype=torch.float64)
    v = torch.randn(n, hv, dv, generator=gen, dtype=torch.float64)
    g = -torch.rand(n, hv, generator=gen, dtype=torch.float64) * 0.5
    beta = torch.rand(n, hv, generator=gen, dtype=torch.float64)
    return q, k, v, g, beta


def test_gated_delta_rule_chunked_matches_token_by_token():
    gen = torch.Generator().manual_seed(2)
    hk, hv, dk, dv, lens = 2, 4, 8, 6, [130, 3, 64]
    seqs = [_gdn_inputs(gen, n, hk, hv, dk, dv) for n in lens]
    states = torch.randn(5, hv, dk, dv, generator=gen, dtype=torch.float64) / 4
    slots = [1, 3, 0]
    pool = states.float().clone()
    qsl = torch.tensor([0, 130, 133, 197], dtype=torch.int32)
    flat = [torch.cat([s[j] for s in seqs]).float() for j in range(5)]
    out = ops_hybrid.gated_delta_rule_prefill(*flat, pool, qsl, torch.tensor(slots), True,
                                              torch.tensor([0, 0]), torch.tensor([48, 96]), torch.tensor([2, 4]))
    for i, (seq, slot) in enumerate(zip(seqs, slots, strict=True)):
        expect, final = _gdn_f64(*seq, states[slot])
        assert rel_err(out[qsl[i]:qsl[i + 1]], expect) < 1e-4
        assert rel_err(pool[slot], final) < 1e-4
    for length, snap_slot in ((48, 2), (96, 4)):
        _, snap = _gdn_f64(*(t[:length] for t in seqs[0]), states[1])
        assert rel_err(pool[snap_slot], snap) < 1e-4


def test_gated_delta_rule_decode_matches_token_by_token():
    gen = torch.Generator().manual_seed(3)
    hk, hv, dk, dv = 2, 4, 8, 6
    q, k, v, g, beta = _gdn_inputs(gen, 3, hk, hv, dk, dv)
    states = torch.randn(4, hv, dk, dv, generator=gen, dtype=torch.float64)
    pool = states.float().clone()
    slots = [3, 0, 1]
    out = ops_hybrid.gated_delta_rule_decode(q.float(), k.float(), v.float(), g.float(), beta.float(), pool,
                                             torch.tensor(slots), True)
    for b, slot in enumerate(slots):
        expect, final = _gdn_f64(q[b:b + 1], k[b:b + 1], v[b:b + 1], g[b:b + 1], beta[b:b + 1], states[slot])
        assert rel_err(out[b], expect[0]) < 1e-5
        assert rel_err(pool[slot], final) < 1e-5
    assert torch.equal(pool[2], states[2].float())


def test_rms_norm_gated():
    gen = torch.Generator().manual_seed(4)
    x, z = torch.randn(7, 32, generator=gen, dtype=torch.float64), torch.randn(7, 32, generator=gen, dtype=torch.float64)
    w = torch.randn(32, generator=gen, dtype=torch.float64)
    expect = x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w * (z / (1 + torch.exp(-z)))
    assert rel_err(ops_hybrid.rms_norm_gated(x.float(), z.float(), w.float(), 1e-6), expect) < 1e-5


def test_ops_pass_torch_opcheck():
    """Schemas, fake impls and mutation declarations are consistent (what torch.compile relies on)."""
    x = torch.randn(4, 8)
    torch.library.opcheck(ops_hybrid.rms_norm_gated, (x, x, torch.ones(8), 1e-6))
    torch.library.opcheck(ops_hybrid.moe_topk_softmax, (torch.randn(4, 6), 2, True))
    torch.library.opcheck(ops_hybrid.causal_conv1d_update,
                          (x, torch.randn(8, 4), None, torch.zeros(4, 8, 3), torch.tensor([2, 0, 1, 3]), True))


def test_gdn_gating():
    gen = torch.Generator().manual_seed(5)
    a, b = torch.randn(6, 4, generator=gen, dtype=torch.float64) * 8, torch.randn(6, 4, generator=gen, dtype=torch.float64)
    a_log, dt_bias = torch.rand(4, generator=gen, dtype=torch.float64) - 2, torch.randn(4, generator=gen, dtype=torch.float64)
    g, beta = ops_hybrid.gdn_gating(a.float(), b.float(), a_log.float(), dt_bias.float())
    x = a + dt_bias
    expect_g = -torch.exp(a_log) * torch.where(x > 20, x, torch.log1p(torch.exp(x)))
    assert g.dtype == torch.float32 and rel_err(g, expect_g) < 1e-6
    assert rel_err(beta, 1 / (1 + torch.exp(-b))) < 1e-6


@pytest.mark.parametrize("shared", ["none", "ungated", "gated"])
def test_moe_block_is_routing_experts_and_shared_expert(shared):
    gen = torch.Generator().manual_seed(6)
    t, h, inter, e, k, i_s = 5, 16, 8, 6, 2, 12
    x = torch.randn(t, h, generator=gen, dtype=torch.float64)
    logits = torch.randn(t, e, generator=gen, dtype=torch.float64)
    w13 = torch.randn(e, 2 * inter, h, generator=gen, dtype=torch.float64) / 4
    w2 = torch.randn(e, h, inter, generator=gen, dtype=torch.float64) / 4
    sw13 = torch.randn(2 * i_s, h, generator=gen, dtype=torch.float64) / 4
    sw2 = torch.randn(h, i_s, generator=gen, dtype=torch.float64) / 4
    sgate = torch.randn(1, h, generator=gen, dtype=torch.float64)
    args = {"none": (None, None, None), "ungated": (sw13, sw2, None), "gated": (sw13, sw2, sgate)}[shared]
    out = ops_hybrid.moe_block(x.float(), logits.float(), w13.float(), w2.float(), k, True,
                               *(None if a is None else a.float() for a in args))
    weights, ids = ops_hybrid.moe_topk_softmax(logits.float(), k, True)
    expect = ops_hybrid.fused_moe(x, w13, w2, weights.double(), ids)
    if shared != "none":
        gu = x @ sw13.t()
        s = (gu[:, :i_s] / (1 + torch.exp(-gu[:, :i_s])) * gu[:, i_s:]) @ sw2.t()
        expect = expect + (torch.sigmoid(x @ sgate.t()) * s if shared == "gated" else s)
    assert rel_err(out, expect) < 1e-5


def test_new_ops_pass_torch_opcheck():
    a = torch.randn(3, 4)
    torch.library.opcheck(ops_hybrid.gdn_gating, (a, a, torch.randn(4), torch.randn(4)))
    x, w13, w2 = torch.randn(2, 8), torch.randn(4, 16, 8), torch.randn(4, 8, 8)
    torch.library.opcheck(ops_hybrid.moe_block, (x, torch.randn(2, 4), w13, w2, 2, True, torch.randn(8, 8),
                                                 torch.randn(8, 4), torch.randn(1, 8)))


def test_fused_decode_step_equals_its_parts():
    gen = torch.Generator().manual_seed(7)
    b_, hk, hv, dk, dv = 3, 2, 4, 8, 6
    q, k = torch.randn(2, b_, hk, dk, generator=gen)
    v, z = torch.randn(2, b_, hv, dv, generator=gen)
    a, b = torch.randn(2, b_, hv, generator=gen)
    a_log, dt_bias, w = torch.randn(hv, generator=gen), torch.randn(hv, generator=gen), torch.randn(dv, generator=gen)
    pool = torch.randn(5, hv, dk, dv, generator=gen)
    slots = torch.tensor([4, 0, 2])
    want_pool = pool.clone()
    g, beta = ops_hybrid.gdn_gating(a, b, a_log, dt_bias)
    want = ops_hybrid.rms_norm_gated(
        ops_hybrid.gated_delta_rule_decode(q, k, v, g, beta, want_pool, slots, True), z, w, 1e-6)
    got = ops_hybrid.gated_delta_rule_decode_fused(q, k, v, a, b, a_log, dt_bias, z, w, 1e-6, pool, slots, True)
    assert torch.equal(got, want) and torch.equal(pool, want_pool)
    torch.library.opcheck(ops_hybrid.gated_delta_rule_decode_fused,
                          (q, k, v, a, b, a_log, dt_bias, z, w, 1e-6, pool, slots, True))


def test_moe_router_norm_is_add_norm_then_router():
    """The fused residual add + norm + router op: opcheck, and its reference is fused_add_rms_norm + F.linear."""
    from revolta_kernels.reference import moe as ref_moe
    from revolta_kernels.reference import norm as ref_norm

    x, res, w, nw = torch.randn(3, 16), torch.randn(3, 16), torch.randn(6, 16), torch.randn(16)
    torch.library.opcheck(ops_hybrid.moe_router_norm, (x, res, w, nw, 1e-6, True))
    logits, normed, h = ops_hybrid.moe_router_norm(x, res, w, nw, 1e-6, True)
    want_n, want_h = ref_norm.fused_add_rms_norm(x, res, nw, 1e-6, True)
    assert torch.equal(h, want_h) and torch.equal(normed, want_n)
    assert torch.equal(logits, ref_moe.moe_router(want_n, w))


@pytest.mark.parametrize("renormalize", [False, True])
def test_moe_router_norm_topk_is_router_norm_then_topk(renormalize):
    """The routing op for a decode step: opcheck, and it equals moe_router_norm followed by moe_topk_softmax."""
    gen = torch.Generator().manual_seed(5)
    x, res = torch.randn(2, 3, 16, generator=gen)
    w, nw = torch.randn(10, 16, generator=gen), torch.randn(16, generator=gen)
    torch.library.opcheck(ops_hybrid.moe_router_norm_topk, (x, res, w, nw, 1e-6, False, 4, renormalize))
    weights, ids, normed, h = ops_hybrid.moe_router_norm_topk(x, res, w, nw, 1e-6, False, 4, renormalize)
    logits, want_n, want_h = ops_hybrid.moe_router_norm(x, res, w, nw, 1e-6, False)
    want_w, want_ids = ops_hybrid.moe_topk_softmax(logits, 4, renormalize)
    assert torch.equal(h, want_h) and torch.equal(normed, want_n)
    assert torch.equal(ids, want_ids) and torch.equal(weights, want_w)
    assert weights.dtype == torch.float32 and ids.dtype == torch.int64 and ids.shape == (3, 4)
    assert torch.equal(ids[:, 0], logits.argmax(-1))


@pytest.mark.parametrize("shared", [False, True])
def test_moe_combine_is_weighted_sum_plus_gated_shared_expert(shared):
    """Against float64: each token's rows weighted by the router and summed, plus sigmoid(x . g) * shared."""
    gen = torch.Generator().manual_seed(11)
    t, k, h = 4, 3, 24
    y = torch.randn(t, k, h, generator=gen, dtype=torch.float64)
    weights = torch.softmax(torch.randn(t, k, generator=gen, dtype=torch.float64), -1)
    s = torch.randn(t, h, generator=gen, dtype=torch.float64)
    x = torch.randn(t, h, generator=gen, dtype=torch.float64)
    g = torch.randn(h, generator=gen, dtype=torch.float64) / 4
    expect = torch.stack([sum(weights[i, j] * y[i, j] for j in range(k)) for i in range(t)])
    if shared:
        expect = expect + torch.sigmoid((x * g).sum(-1, keepdim=True)) * s
    args = (s.float(), x.float(), g.float()) if shared else (None, None, None)
    out = ops_hybrid.moe_combine(y.float(), weights.float(), *args)
    assert out.dtype == torch.float32 and rel_err(out, expect) < 1e-6
    torch.library.opcheck(ops_hybrid.moe_combine, (y.float(), weights.float(), *args))
    with pytest.raises(ValueError, match="needs x and shared_gate"):
        ops_hybrid.moe_combine(y.float(), weights.float(), s.float(), None, None)
