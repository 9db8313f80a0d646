"""References of the Gated DeltaNet ops (revolta_kernels.ops_gdn) against float64 math written here."""

from __future__ import annotations

import torch
from kernels_cases import rel_err

from revolta_kernels import ops_gdn


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
    out = ops_gdn.causal_conv1d(torch.cat(xs).float(), w.float(), None, pool, qsl, torch.tensor(slots), True,
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
    y = ops_gdn.causal_conv1d_update(x1.float(), w.float(), None, pool, torch.tensor([4, 2]), True)
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
    out = ops_gdn.gated_delta_rule_prefill(*flat, pool, qsl, torch.tensor(slots), True,
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
    out = ops_gdn.gated_delta_rule_decode(q.float(), k.float(), v.float(), g.float(), beta.float(), pool,
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
    assert rel_err(ops_gdn.rms_norm_gated(x.float(), z.float(), w.float(), 1e-6), expect) < 1e-5


def test_ops_pass_torch_opcheck():
    """Schemas, fake impls and mutation declarations are consistent (what torch.compile relies on)."""
    x = torch.randn(4, 8)
    torch.library.opcheck(ops_gdn.rms_norm_gated, (x, x, torch.ones(8), 1e-6))
    torch.library.opcheck(ops_gdn.causal_conv1d_update,
                          (x, torch.randn(8, 4), None, torch.zeros(4, 8, 3), torch.tensor([2, 0, 1, 3]), True))
    a = torch.randn(3, 4)
    torch.library.opcheck(ops_gdn.gdn_gating, (a, a, torch.randn(4), torch.randn(4)))


def test_gdn_gating():
    gen = torch.Generator().manual_seed(5)
    a, b = torch.randn(6, 4, generator=gen, dtype=torch.float64) * 8, torch.randn(6, 4, generator=gen, dtype=torch.float64)
    a_log, dt_bias = torch.rand(4, generator=gen, dtype=torch.float64) - 2, torch.randn(4, generator=gen, dtype=torch.float64)
    g, beta = ops_gdn.gdn_gating(a.float(), b.float(), a_log.float(), dt_bias.float())
    x = a + dt_bias
    expect_g = -torch.exp(a_log) * torch.where(x > 20, x, torch.log1p(torch.exp(x)))
    assert g.dtype == torch.float32 and rel_err(g, expect_g) < 1e-6
    assert rel_err(beta, 1 / (1 + torch.exp(-b))) < 1e-6


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
    g, beta = ops_gdn.gdn_gating(a, b, a_log, dt_bias)
    want = ops_gdn.rms_norm_gated(
        ops_gdn.gated_delta_rule_decode(q, k, v, g, beta, want_pool, slots, True), z, w, 1e-6)
    got = ops_gdn.gated_delta_rule_decode_fused(q, k, v, a, b, a_log, dt_bias, z, w, 1e-6, pool, slots, True)
    assert torch.equal(got, want) and torch.equal(pool, want_pool)
    torch.library.opcheck(ops_gdn.gated_delta_rule_decode_fused,
                          (q, k, v, a, b, a_log, dt_bias, z, w, 1e-6, pool, slots, True))
