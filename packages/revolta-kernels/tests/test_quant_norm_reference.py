"""CPU reference of ``revolta::quant_matmul_add_rms_norm`` against float64 from the unpacked integers."""

from __future__ import annotations

import pytest
import torch

from revolta_kernels import ops_quant
from revolta_kernels.reference import quant as rq


@pytest.mark.parametrize(("residual", "zc"), [(True, False), (False, False), (True, True), (False, True)])
@pytest.mark.parametrize(("bits", "group"), [(4, 32), (8, 64)])
@pytest.mark.parametrize("m", [1, 3, 8])
def test_reference_matches_float64(residual, zc, bits, group, m):
    k, n = 256, 40
    gen = torch.Generator().manual_seed(m + bits + 2 * zc)
    q = torch.randint(0, 1 << bits, (k, n), generator=gen)
    z = torch.randint(0, 1 << bits, (k // group, n), generator=gen)
    s = (torch.rand(k // group, n, generator=gen) * 0.02 + 0.001).half()
    qweight, qzeros = rq.pack_int32(q, bits, 0), rq.pack_int32(z, bits, 1)
    x = torch.randn(m, k, generator=gen).half()
    r = torch.randn(m, k, generator=gen).half() if residual else None
    w = (torch.rand(k, generator=gen) + 0.5).half()
    y, h = ops_quant.quant_matmul_add_rms_norm(x, r, w, 1e-5, zc, qweight, s, qzeros, bits, group, 0)
    h64 = (x.double() + r.double()).half().double() if residual else x.double()  # h rounded to fp16 once
    assert torch.equal(h.double(), h64) and h.dtype == torch.float16
    if r is None:
        assert h.data_ptr() != x.data_ptr()
    normed = h64 * torch.rsqrt(h64.pow(2).mean(-1, keepdim=True) + 1e-5) * (w.double() + (1.0 if zc else 0.0))
    w64 = (q.double() - z.double().repeat_interleave(group, 0)) * s.double().repeat_interleave(group, 0)
    a = normed.half().double()  # the normed activation is rounded to fp16 before the GEMM
    assert y.shape == (m, n) and y.dtype == torch.float16
    torch.testing.assert_close(y.double(), a @ w64, rtol=2e-3, atol=2e-3 * float((a.abs() @ w64.abs()).max()))
    y3, h3 = ops_quant.quant_matmul_add_rms_norm(x.view(1, m, k), r.view(1, m, k) if residual else None, w, 1e-5, zc,
                                                 qweight, s, qzeros, bits, group, 0)
    assert y3.shape == (1, m, n) and h3.shape == (1, m, k)
