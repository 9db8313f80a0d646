"""References of the mixture-of-experts ops (revolta_kernels.ops_moe) against float64 math written here."""

from __future__ import annotations

import pytest
import torch
from kernels_cases import rel_err

from revolta_kernels import ops_moe


@pytest.mark.parametrize("renormalize", [True, False])
def test_moe_routing_and_experts(renormalize):
    gen = torch.Generator().manual_seed(0)
    t, h, inter, e, k = 9, 16, 12, 6, 2
    x = torch.randn(t, h, generator=gen, dtype=torch.float64)
    w13 = torch.randn(e, 2 * inter, h, generator=gen, dtype=torch.float64) / 4
    w2 = torch.randn(e, h, inter, generator=gen, dtype=torch.float64) / 4
    logits = torch.randn(t, e, generator=gen, dtype=torch.float64)
    weights, ids = ops_moe.moe_topk_softmax(logits.float(), k, renormalize)
    out = ops_moe.fused_moe(x.float(), w13.float(), w2.float(), weights, ids)
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


def test_ops_pass_torch_opcheck():
    """Schemas and fake impls are consistent (what torch.compile relies on)."""
    torch.library.opcheck(ops_moe.moe_topk_softmax, (torch.randn(4, 6), 2, True))
    x, w13, w2 = torch.randn(2, 8), torch.randn(4, 16, 8), torch.randn(4, 8, 8)
    torch.library.opcheck(ops_moe.moe_block, (x, torch.randn(2, 4), w13, w2, 2, True, torch.randn(8, 8),
                                              torch.randn(8, 4), torch.randn(1, 8)))


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
    out = ops_moe.moe_block(x.float(), logits.float(), w13.float(), w2.float(), k, True,
                               *(None if a is None else a.float() for a in args))
    weights, ids = ops_moe.moe_topk_softmax(logits.float(), k, True)
    expect = ops_moe.fused_moe(x, w13, w2, weights.double(), ids)
    if shared != "none":
        gu = x @ sw13.t()
        s = (gu[:, :i_s] / (1 + torch.exp(-gu[:, :i_s])) * gu[:, i_s:]) @ sw2.t()
        expect = expect + (torch.sigmoid(x @ sgate.t()) * s if shared == "gated" else s)
    assert rel_err(out, expect) < 1e-5


def test_moe_router_norm_is_add_norm_then_router():
    """The fused residual add + norm + router op: opcheck, and its reference is fused_add_rms_norm + F.linear."""
    from revolta_kernels.reference import moe as ref_moe
    from revolta_kernels.reference import norm as ref_norm

    x, res, w, nw = torch.randn(3, 16), torch.randn(3, 16), torch.randn(6, 16), torch.randn(16)
    torch.library.opcheck(ops_moe.moe_router_norm, (x, res, w, nw, 1e-6, True))
    logits, normed, h = ops_moe.moe_router_norm(x, res, w, nw, 1e-6, True)
    want_n, want_h = ref_norm.fused_add_rms_norm(x, res, nw, 1e-6, True)
    assert torch.equal(h, want_h) and torch.equal(normed, want_n)
    assert torch.equal(logits, ref_moe.moe_router(want_n, w))


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
    out = ops_moe.moe_combine(y.float(), weights.float(), *args)
    assert out.dtype == torch.float32 and rel_err(out, expect) < 1e-6
    torch.library.opcheck(ops_moe.moe_combine, (y.float(), weights.float(), *args))
    with pytest.raises(ValueError, match="needs x and shared_gate"):
        ops_moe.moe_combine(y.float(), weights.float(), s.float(), None, None)
