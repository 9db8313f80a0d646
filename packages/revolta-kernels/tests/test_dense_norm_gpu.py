"""The skinny fp16 GEMV with the residual add + RMSNorm in front (``revolta::dense_linear_add_rms_norm``) against
its reference (``fused_add_rms_norm`` / ``rms_norm`` reference, then the matmul in float32) on the GPU, with
programmatic dependent launch as the process has it.

Bounds: ``h`` (the new residual) equals the reference bit for bit; the output is within the dense GEMV's bound
of test_gemv_gpu.py against ``a @ W^T`` with ``a`` = the reference's fp16 normed activation:
|native - ref| <= 1e-3 * (|a| @ |W|^T) + 2e-3 * |ref| (the kernel does not round the normed activation to fp16:
< 1 ulp = 2^-11 relative per activation, inside the first term) and relative L2 error <= 2e-3. Outputs are
poisoned (NaN in the allocator) before each call. A chain of dependent calls (each output feeding the next
call's x, h its residual) checks the PDL ordering step by step, eagerly and in a CUDA graph.
"""

from __future__ import annotations

import pytest
import torch
from kernels_cases import NATIVE_GPU, poison

from revolta_kernels import native_dense, ops_quant, tuning
from revolta_kernels.reference import norm as ref_norm

pytestmark = NATIVE_GPU

EPS = 1e-6


def case(m: int, k: int, n: int, residual: bool, zero_centered: bool, seed: int):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    w = (torch.randn(n, k, device="cuda", generator=gen) * 0.05).half()
    x = torch.randn(m, k, device="cuda", generator=gen).half()
    res = (torch.randn(m, k, device="cuda", generator=gen) * 2).half() if residual else None
    g = (torch.randn(k, device="cuda", generator=gen) * (0.1 if zero_centered else 0.5) + (0 if zero_centered else 1))
    return x, res, g.half(), w


def reference(x, res, g, zero_centered):
    if res is None:
        return ref_norm.rms_norm(x, g, EPS, zero_centered), x
    return ref_norm.fused_add_rms_norm(x, res, g, EPS, zero_centered)


def assert_close(got, h, x, res, g, w, zero_centered):
    a, ref_h = reference(x, res, g, zero_centered)
    assert h.dtype == torch.float16 and h.shape == x.shape
    assert torch.equal(h, ref_h), f"h differs in {int((h != ref_h).sum())} elements"
    if res is None:
        assert h.data_ptr() != x.data_ptr()
    ref = a.float() @ w.float().t()
    bound = 1e-3 * (a.float().abs() @ w.float().abs().t()) + 2e-3 * ref.abs()
    err = (got.float() - ref).abs()
    assert got.dtype == torch.float16 and got.shape == ref.shape
    assert bool(torch.isfinite(got).all())
    assert bool((err <= bound).all()), f"max excess {float((err - bound).max())}"
    assert float(torch.linalg.norm(got.float() - ref) / torch.linalg.norm(ref)) < 2e-3


SHAPES = [  # (K, N): Qwen3.5-35B-A3B GDN in_proj and attention qkv, Llama-8B qkv and gate_up, then odd sizes
    (2048, 12352), (2048, 9216), (4096, 6144), (4096, 28672), (8192, 1024),
    (8, 1), (264, 3), (4104, 7), (1032, 1001), (2048, 13),
]


@pytest.mark.parametrize(("residual", "zero_centered"), [(True, False), (True, True), (False, False), (False, True)])
@pytest.mark.parametrize("m", [1, 2, 3, 4, 5, 8])
@pytest.mark.parametrize(("k", "n"), SHAPES)
def test_dense_norm_matches_reference(k, n, m, residual, zero_centered):
    x, res, g, w = case(m, k, n, residual, zero_centered, seed=k + n + m)
    assert native_dense.dense_norm_supports(x, res, g, w)
    poison(m * (n + k))
    got, h = ops_quant.dense_linear_add_rms_norm(x, res, g, EPS, zero_centered, w)
    assert_close(got, h, x, res, g, w, zero_centered)


@pytest.mark.parametrize(("warps", "rows"), [(4, 4), (4, 8), (8, 8)])
@pytest.mark.parametrize("m", [1, 2, 8])
def test_dense_norm_block_shapes(warps, rows, m):
    try:
        tuning.dense_tune(warps, rows, norm=True)
        assert tuning.dense_plan(m, norm=True) == {"warps": warps, "rows_per_block": 4 if m > 4 else rows}
        for k, n in ((4096, 6144), (264, 3), (2048, 13)):
            x, res, g, w = case(m, k, n, True, True, seed=warps * rows + m + k)
            poison(m * (n + k))
            got, h = ops_quant.dense_linear_add_rms_norm(x, res, g, EPS, True, w)
            assert_close(got, h, x, res, g, w, True)
    finally:
        tuning.dense_tune(norm=True)


def test_dense_norm_leading_dims_unaligned_and_fallbacks():
    x, res, g, w = case(6, 512, 96, True, False, seed=3)
    buf = torch.empty(6 * 512 + 8, dtype=torch.float16, device="cuda")
    x_off = buf[4:4 + 6 * 512].view(6, 512)  # 8-byte aligned: copied to an aligned tensor first
    x_off.copy_(x)
    got, h = ops_quant.dense_linear_add_rms_norm(x_off.view(2, 3, 512), res.view(2, 3, 512), g, EPS, False, w)
    assert got.shape == (2, 3, 96) and h.shape == (2, 3, 512)
    assert_close(got.view(6, 96), h.view(6, 512), x, res, g, w, False)
    # 9 rows (above the skinny limit), a float32 norm weight, K % 8 != 0: the unfused ops, same results
    for xx, rr, gg, ww in (case(9, 512, 96, True, False, seed=4), (x, res, g.float(), w)):
        assert not native_dense.dense_norm_supports(xx, rr, gg, ww)
        got, h = ops_quant.dense_linear_add_rms_norm(xx, rr, gg, EPS, False, ww)
        a, ref_h = ref_norm.fused_add_rms_norm(xx, rr, gg.half(), EPS, False)
        torch.testing.assert_close(h, ref_h, rtol=0, atol=0)
        torch.testing.assert_close(got, a @ ww.t(), rtol=5e-3, atol=5e-3)
    x7, r7, g7, w7 = case(2, 260, 5, True, False, seed=5)
    x7, r7, g7, w7 = x7[:, :260 - 2].contiguous(), r7[:, :258].contiguous(), g7[:258].contiguous(), w7[:, :258]
    assert not native_dense.dense_norm_supports(x7, r7, g7, w7.contiguous())


@pytest.mark.parametrize("graph", [False, True])
@pytest.mark.parametrize("m", [1, 2])
def test_dense_norm_dependent_chain_eager_and_graph(m, graph):
    """y_l, h_l = op(y_{l-1}, h_{l-1}): each call reads what the previous one wrote (x and residual)."""
    k = 2048
    gen = torch.Generator(device="cuda").manual_seed(m)
    ws = [(torch.randn(k, k, device="cuda", generator=gen) * 0.03).half() for _ in range(12)]
    gs = [(torch.randn(k, device="cuda", generator=gen) * 0.1).half() for _ in range(12)]
    x0 = torch.randn(m, k, device="cuda", generator=gen).half()
    r0 = torch.randn(m, k, device="cuda", generator=gen).half()
    outs: list = []

    def run():
        outs.clear()
        y, h = x0, r0
        for i, (w, g) in enumerate(zip(ws, gs, strict=True)):
            y, h = ops_quant.dense_linear_add_rms_norm(y, None if i == 6 else h, g, EPS, True, w)
            outs.append((y, h))

    if graph:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            run()
        torch.cuda.current_stream().wait_stream(s)
        gr = torch.cuda.CUDAGraph()
        with torch.cuda.graph(gr):
            run()
        for y, h in outs:
            y.fill_(float("nan"))
            h.fill_(float("nan"))
        gr.replay()
    else:
        run()
    torch.cuda.synchronize()
    y, h = x0, r0
    for i, ((got, got_h), w, g) in enumerate(zip(outs, ws, gs, strict=True)):
        res = None if i == 6 else h
        assert_close(got, got_h, y, res, g, w, True)
        y, h = got, got_h
