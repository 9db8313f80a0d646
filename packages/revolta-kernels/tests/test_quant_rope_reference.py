"""``revolta::quant_qkv_rope_cache`` on the CPU (its reference: the fused-norm quantized projection, then rotary and
the cache write) against the float64 oracle of quant_rope_cases: q, and the keys and values in the cache slots;
a padding token (slot -1) caches nothing and the slots nobody owns keep their contents."""

from __future__ import annotations

import pytest
import torch
from quant_rope_cases import SENTINEL, cached, make_case, oracle

from revolta_kernels import ops_quant


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.linalg.norm(a.double() - b) / torch.linalg.norm(b))


@pytest.mark.parametrize(("neox", "rot", "residual"), [(True, 64, True), (False, 64, False), (True, 32, True)])
def test_reference_matches_the_oracle(neox, rot, residual):
    heads, kv_heads, d, slots = 4, 2, 64, [9, -1]
    x, res, w, qweight, scales, qzeros, positions, cos_sin, kc, vc, slot_t = make_case(
        2, 256, heads, kv_heads, d, rot, seed=rot, residual=residual, slots=slots, device="cpu")
    q, h = ops_quant.quant_qkv_rope_cache(x, res, w, 1e-5, False, qweight, scales, qzeros, 4, 128, 0, positions,
                                          cos_sin, neox, heads, kc, vc, slot_t, None, None)
    q_ref, k_ref, v_ref = oracle(x, res, w, False, qweight, scales, qzeros, positions, cos_sin, neox, heads, kv_heads, d)
    assert q.shape == (2, heads, d) and h.shape == x.shape
    assert torch.equal(h, x + res if residual else x)
    assert rel(q, q_ref) < 5e-3
    assert rel(cached(kc, 9), k_ref[0]) < 5e-3 and rel(cached(vc, 9), v_ref[0]) < 5e-3
    kc[9 // 16, :, 9 % 16] = SENTINEL  # the one slot written; everything else must still be the sentinel
    vc[9 // 16, :, 9 % 16] = SENTINEL
    assert bool((kc == SENTINEL).all()) and bool((vc == SENTINEL).all())
