"""``revolta::quant_matmul_add_rms_norm`` (residual add + RMSNorm fused into the skinny int4/int8 kernel's
activation staging) against its reference on the GPU, and the co-resident skinny variant (tune gemv_minb=4).

Reference: ``fused_add_rms_norm`` (``rms_norm`` without a residual) of the reference module, then the
dequantized weight in float32. Bounds: ``h`` bit-for-bit equal to the reference's new residual (an fp16 add
rounded once, exactly what the kernel does); ``y`` within test_quant_gpu.py's bound around
``normed_ref @ W`` (|err| <= 2e-3 (|a| @ |W|) + 2e-3 |ref| elementwise, relative L2 <= 5e-3): the kernel's
sum of squares runs in another order, so a normed activation may differ from the reference's by one fp16 ulp
(2^-11 relative), which the first term covers. Outputs are poisoned (NaN in the allocator) before each call.
"""

from __future__ import annotations

import pytest
import torch
from kernels_cases import NATIVE_GPU, poison, random_quant_weight

from revolta_kernels import native_quant, ops_quant, tuning
from revolta_kernels.reference import norm as ref_norm
from revolta_kernels.reference import quant as rq

pytestmark = NATIVE_GPU


def make_case(m: int, k: int, n: int, bits: int, group: int, seed: int, residual: bool, magnitude: float = 1.0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    qweight, scales, qzeros = random_quant_weight(k, n, bits, group, gen)
    x = (torch.randn(m, k, device="cuda", generator=gen) * 3 * magnitude).half()
    res = (torch.randn(m, k, device="cuda", generator=gen) * 5 * magnitude).half() if residual else None
    w = (torch.rand(k, device="cuda", generator=gen) * 1.5 + 0.25).half()
    return x, res, w, qweight, scales, qzeros


def reference(x, res, w, eps, zc, qweight, scales, qzeros, bits, group, offset):
    if res is None:
        normed, h = ref_norm.rms_norm(x, w, eps, zc), x
    else:
        normed, h = ref_norm.fused_add_rms_norm(x, res, w, eps, zc)
    wd = rq.dequantize(qweight, scales, qzeros, bits, group, offset)
    return normed, h, wd


def check(m, k, n, bits, group, offset, residual, zc, seed=0, magnitude=1.0):
    x, res, w, qweight, scales, qzeros = make_case(m, k, n, bits, group, seed, residual, magnitude)
    eps = 1e-5
    assert native_quant.norm_supports(x, res, w, qweight, scales, qzeros, bits, group)
    x0, r0 = x.clone(), res.clone() if res is not None else None
    poison(m * (n + k))
    y, h = ops_quant.quant_matmul_add_rms_norm(x, res, w, eps, zc, qweight, scales, qzeros, bits, group, offset)
    torch.cuda.synchronize()
    assert torch.equal(x, x0) and (res is None or torch.equal(res, r0)), "inputs must not be modified"
    normed, h_ref, wd = reference(x, res, w, eps, zc, qweight, scales, qzeros, bits, group, offset)
    assert h.shape == x.shape and h.dtype == torch.float16
    assert h.data_ptr() not in (x.data_ptr(), res.data_ptr() if res is not None else -1)
    assert torch.equal(h, h_ref), f"h differs in {int((h != h_ref).sum())} elements"
    ref = normed.float() @ wd
    bound = 2e-3 * (normed.float().abs() @ wd.abs()) + 2e-3 * ref.abs()
    err = (y.float() - ref).abs()
    assert y.shape == (m, n) and y.dtype == torch.float16
    assert bool(torch.isfinite(y).all())
    assert bool((err <= bound).all()), f"max excess {float((err - bound).max())}"
    assert float(torch.linalg.norm(y.float() - ref) / torch.linalg.norm(ref)) < 5e-3


SHAPES = [  # (K = hidden, N, bits, group, zero offset): Llama-8B qkv / gate_up / o, Qwen 27B-class, small, int8
    (4096, 6144, 4, 128, 0), (4096, 28672, 4, 128, 0), (4096, 4096, 4, 128, 0), (5120, 27648, 4, 128, 0),
    (4096, 6144, 4, 32, 1), (2048, 1024, 4, 64, 1), (4096, 4096, 8, 128, 1), (1024, 40, 8, 32, 0),
]


@pytest.mark.parametrize("m", [1, 2, 3, 4, 5, 8])
@pytest.mark.parametrize(("k", "n", "bits", "group", "offset"), SHAPES)
def test_fused_norm_matches_reference(k, n, bits, group, offset, m):
    check(m, k, n, bits, group, offset, residual=True, zc=False, seed=k + n + m)


@pytest.mark.parametrize(("residual", "zc"), [(False, False), (False, True), (True, True)])
@pytest.mark.parametrize("m", [1, 3, 8])
@pytest.mark.parametrize(("k", "n", "bits", "group", "offset"), [SHAPES[0], SHAPES[3], SHAPES[6]])
def test_fused_norm_no_residual_and_zero_centered(k, n, bits, group, offset, m, residual, zc):
    check(m, k, n, bits, group, offset, residual=residual, zc=zc, seed=7 * m + k)


@pytest.mark.parametrize("magnitude", [1e-4, 1e-2, 40.0])
@pytest.mark.parametrize("m", [1, 2, 5])
@pytest.mark.parametrize(("k", "n", "bits", "splits"), [(4096, 6144, 4, 1), (4096, 28672, 4, 1), (8192, 10240, 4, 2),
                                                      (5120, 7168, 4, 2), (4096, 4096, 8, 1)])
def test_fused_norm_residual_stream_magnitudes(k, n, bits, splits, m, magnitude):
    # The kernels stage h * w scaled by a power of two per warp and apply 1 / rms to the finished sums: a
    # residual stream far from unit size (early layers' small embeddings, late layers' large activations) must
    # meet the same bound. splits: the least K splits the plan must pick here (2 = several: each block then
    # sums h^2 over the whole K itself).
    if splits > 1:
        plan = tuning.quant_plan(m, n, k, bits, 128, torch.device("cuda"))
        assert plan["splits"] >= splits and not plan["full"], plan
    check(m, k, n, bits, 128, 0, residual=True, zc=False, seed=k + n + m, magnitude=magnitude)
    check(m, k, n, bits, 128, 1, residual=False, zc=True, seed=k + n + m + 1, magnitude=magnitude)


def test_fused_norm_leading_dims_fallbacks_and_graph_replay():
    x, res, w, qweight, scales, qzeros = make_case(4, 1024, 256, 4, 128, 3, True)
    # leading dims
    y, h = ops_quant.quant_matmul_add_rms_norm(x.view(2, 2, 1024), res.view(2, 2, 1024), w, 1e-6, False,
                                               qweight, scales, qzeros, 4, 128, 0)
    assert y.shape == (2, 2, 256) and h.shape == (2, 2, 1024)
    y2, h2 = ops_quant.quant_matmul_add_rms_norm(x, res, w, 1e-6, False, qweight, scales, qzeros, 4, 128, 0)
    assert torch.equal(y.view(4, 256), y2) and torch.equal(h.view(4, 1024), h2)
    # more than 8 rows: the norm kernel then the GEMM (same results as the reference)
    x9, r9, *_ = make_case(9, 1024, 256, 4, 128, 4, True)
    assert not native_quant.norm_supports(x9, r9, w, qweight, scales, qzeros, 4, 128)
    y9, h9 = ops_quant.quant_matmul_add_rms_norm(x9, r9, w, 1e-6, False, qweight, scales, qzeros, 4, 128, 0)
    normed, h_ref, wd = reference(x9, r9, w, 1e-6, False, qweight, scales, qzeros, 4, 128, 0)
    assert torch.equal(h9, h_ref)
    torch.testing.assert_close(y9.float(), normed.float() @ wd, rtol=5e-3, atol=5e-3)
    # CUDA graph replay: the split-K counters re-arm, h / y identical to the eager call
    ops_quant.quant_matmul_add_rms_norm(x, res, w, 1e-6, False, qweight, scales, qzeros, 4, 128, 0)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        yg, hg = ops_quant.quant_matmul_add_rms_norm(x, res, w, 1e-6, False, qweight, scales, qzeros, 4, 128, 0)
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    assert torch.equal(yg, y2) and torch.equal(hg, h2)


def test_fused_norm_chain_matches_separate_ops():
    # A decode-shaped chain (qkv with the fused norm, o, gate_up with the fused norm, down with fused SiLU),
    # eagerly: the same h as the separate norm kernels, y within the bound of each step.
    k = 2048
    gen = torch.Generator(device="cuda").manual_seed(11)

    def wts(kk, nn):
        return (torch.randint(-(2**31), 2**31 - 1, (kk // 8, nn), dtype=torch.int32, device="cuda", generator=gen),
                (torch.rand(kk // 128, nn, device="cuda", generator=gen) * 2e-3 + 1e-3).half(),
                torch.randint(-(2**31), 2**31 - 1, (kk // 128, nn // 8), dtype=torch.int32, device="cuda",
                              generator=gen))

    qkv, o, gu, down = wts(k, 3072), wts(k, k), wts(k, 2 * 4096), wts(4096, k)
    ln1 = (torch.rand(k, device="cuda", generator=gen) + 0.5).half()
    ln2 = (torch.rand(k, device="cuda", generator=gen) + 0.5).half()
    x = torch.randn(1, k, device="cuda", generator=gen).half()
    residual = None
    for _ in range(3):
        a, h = ops_quant.quant_matmul_add_rms_norm(x, residual, ln1, 1e-5, False, *qkv, 4, 128, 0)
        if residual is None:
            assert torch.equal(h, x)
        else:
            assert torch.equal(h, ref_norm.fused_add_rms_norm(x, residual, ln1, 1e-5)[1])
        attn = ops_quant.quant_matmul(a[:, :k].contiguous(), *o, 4, 128, 0)
        g, h2 = ops_quant.quant_matmul_add_rms_norm(attn, h, ln2, 1e-5, False, *gu, 4, 128, 0)
        assert torch.equal(h2, ref_norm.fused_add_rms_norm(attn, h, ln2, 1e-5)[1])
        x, residual = ops_quant.quant_matmul_silu(g, *down, 4, 128, 0), h2
        assert bool(torch.isfinite(x).all())


@pytest.fixture
def restore_tuning():
    yield
    tuning.quant_tune()


@pytest.mark.parametrize("share", [1, 2])
@pytest.mark.parametrize("m", [1, 2, 3])
@pytest.mark.parametrize(("k", "n", "bits"), [(4096, 4096, 4), (4096, 6144, 4), (14336, 4096, 4), (4096, 14336, 4),
                                              (4096, 4096, 8)])
def test_coresident_variant_matches_reference(restore_tuning, share, m, k, n, bits):
    # gemv_minb=4 (8 warps x 4 rows, <= 64 registers) where it exists (M <= 2); M = 3 ignores it. The
    # split-K-free kernel off: its rule would take 4096x4096 and 4096x6144 (the plan must not pick it where the test forces the co-resident one).
    tuning.quant_tune(8, 4, 1, gemv_share=share, gemv_minb=4, gemv_full=0)
    plan = tuning.quant_plan(m, n, k, bits, 128, torch.device("cuda"))
    assert plan["minb"] == (4 if m <= 2 else 1)
    gen = torch.Generator(device="cuda").manual_seed(m + n)
    qweight = torch.randint(-(2**31), 2**31 - 1, (k * bits // 32, n), dtype=torch.int32, device="cuda", generator=gen)
    qzeros = torch.randint(-(2**31), 2**31 - 1, (k // 128, n * bits // 32), dtype=torch.int32, device="cuda",
                           generator=gen)
    scales = (torch.rand(k // 128, n, device="cuda", generator=gen) * 0.01 + 1e-3).half()
    x = torch.randn(m, k, device="cuda", generator=gen).half()
    poison(m * n)
    got = ops_quant.quant_matmul(x, qweight, scales, qzeros, bits, 128, 0)
    w = rq.dequantize(qweight, scales, qzeros, bits, 128, 0)
    ref = x.float() @ w
    bound = 2e-3 * (x.float().abs() @ w.abs()) + 2e-3 * ref.abs()
    assert bool(((got.float() - ref).abs() <= bound).all())
    # and the fused norm through the same variant
    res = torch.randn(m, k, device="cuda", generator=gen).half()
    nw = (torch.rand(k, device="cuda", generator=gen) + 0.5).half()
    y, h = ops_quant.quant_matmul_add_rms_norm(x, res, nw, 1e-5, False, qweight, scales, qzeros, bits, 128, 0)
    normed, h_ref = ref_norm.fused_add_rms_norm(x, res, nw, 1e-5)
    assert torch.equal(h, h_ref)
    ref = normed.float() @ w
    bound = 2e-3 * (normed.float().abs() @ w.abs()) + 2e-3 * ref.abs()
    assert bool(((y.float() - ref).abs() <= bound).all())


@pytest.mark.parametrize("gemv_full", [0, 1])
@pytest.mark.parametrize("m", [1, 2, 3])
@pytest.mark.parametrize(("k", "n"), [(4096, 4096), (4096, 6144), (4096, 28672), (2048, 1024), (1024, 256),
                                      (3072, 96), (14336, 4096)])
def test_split_k_free_variant_matches_reference(restore_tuning, gemv_full, m, k, n):
    # gemv_full=1: csrc/quant_gemv_whole_k.cuh wherever it exists (int4 g128, K % 1024 == 0, K <= 4096, N % 32 == 0,
    # M <= 2), plain quant_matmul and the fused norm; elsewhere the split-K kernel.
    tuning.quant_tune(gemv_full=gemv_full)
    plan = tuning.quant_plan(m, n, k, 4, 128, torch.device("cuda"))
    assert plan["full"] == int(gemv_full == 1 and m <= 2 and k <= 4096)
    x, res, w, qweight, scales, qzeros = make_case(m, k, n, 4, 128, seed=m * k + n, residual=True)
    poison(m * n)
    got = ops_quant.quant_matmul(x, qweight, scales, qzeros, 4, 128, 0)
    wd = rq.dequantize(qweight, scales, qzeros, 4, 128, 0)
    ref = x.float() @ wd
    bound = 2e-3 * (x.float().abs() @ wd.abs()) + 2e-3 * ref.abs()
    assert bool(torch.isfinite(got).all()) and bool(((got.float() - ref).abs() <= bound).all())
    for residual in (True, False):
        check(m, k, n, 4, 128, 0, residual=residual, zc=not residual, seed=m + k + n + residual)


def test_split_k_free_variant_in_dependent_graph_chain(restore_tuning):
    # PDL chain (each output feeds the next call) captured in a graph: the same as the split-K kernel's chain.
    gen = torch.Generator(device="cuda").manual_seed(5)
    k = 4096
    ws = [(torch.randint(-(2**31), 2**31 - 1, (k // 8, k), dtype=torch.int32, device="cuda", generator=gen),
           (torch.rand(k // 128, k, device="cuda", generator=gen) * 2e-3 + 1e-3).half(),
           torch.randint(-(2**31), 2**31 - 1, (k // 128, k // 8), dtype=torch.int32, device="cuda", generator=gen))
          for _ in range(4)]
    nw = (torch.rand(k, device="cuda", generator=gen) + 0.5).half()
    x0 = torch.randn(1, k, device="cuda", generator=gen).half()

    def chain():
        x, r = x0, None
        for w in ws:
            y, r = ops_quant.quant_matmul_add_rms_norm(x, r, nw, 1e-5, False, *w, 4, 128, 0)
            x = ops_quant.quant_matmul(y, *w, 4, 128, 0)
        return x, r

    tuning.quant_tune(gemv_full=0)
    want = chain()
    tuning.quant_tune(gemv_full=1)
    eager = chain()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = chain()
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(out[0], eager[0]) and torch.equal(out[1], eager[1])
    torch.testing.assert_close(eager[0].float(), want[0].float(), rtol=2e-2, atol=2e-2 * float(want[0].abs().max()))
    torch.testing.assert_close(eager[1].float(), want[1].float(), rtol=2e-2, atol=2e-2 * float(want[1].abs().max()))


@pytest.mark.parametrize("flags", [-1, 0, 1, 2, 3, 4, 6, 7, 8, 10])
@pytest.mark.parametrize("m", [1, 2])
@pytest.mark.parametrize(("k", "n"), [(4096, 4096), (4096, 6144), (4096, 28672), (2048, 1024), (1024, 256),
                                      (14336, 4096)])
def test_schedule_flags_match_reference(restore_tuning, flags, m, k, n):
    # tune gemv_flags: 1 = PDL trigger at kernel start, 2 = one-pass x staging (act 2 in one L2 round trip; the
    # split-K-free kernel stages per warp), 4 = the split-K-free kernel with 16-column blocks (plan minb 3), 8 = the
    # same only without the fused norm (plan() describes the plain call); -1 = the default (2 | 4).
    tuning.quant_tune(gemv_flags=flags)
    narrow = bool((flags if flags >= 0 else 6) & 12)
    plan = tuning.quant_plan(m, n, k, 4, 128, torch.device("cuda"))
    if plan["full"]:
        assert plan["minb"] == (3 if narrow else 2)
        assert plan["column_tiles"] == n // (16 if narrow else 32)
    x, res, w, qweight, scales, qzeros = make_case(m, k, n, 4, 128, seed=m * k + n + flags, residual=True)
    poison(m * n)
    got = ops_quant.quant_matmul(x, qweight, scales, qzeros, 4, 128, 0)
    wd = rq.dequantize(qweight, scales, qzeros, 4, 128, 0)
    ref = x.float() @ wd
    bound = 2e-3 * (x.float().abs() @ wd.abs()) + 2e-3 * ref.abs()
    assert bool(torch.isfinite(got).all()) and bool(((got.float() - ref).abs() <= bound).all())
    for residual in (True, False):
        check(m, k, n, 4, 128, 0, residual=residual, zc=not residual, seed=m + k + n + residual + flags)
