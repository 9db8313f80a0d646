"""The skinny kernels (int4 split-K and split-K-free, int8 weights, act-order) with int8 activations and dp4a dot
products (csrc/quant_gemv_dp4a.cuh; the ops' ``int8_activations=True``) against the float32 reference on the GPU.

The kernel rounds each step's activations (64 consecutive channels of an int4 packed-row step, 32 with 4-row steps
or int8 weights) to
int8 with one symmetric scale, so its error has a term the fp16 path does not: at most half a quantization step,
amax / 254, per activation. The bound is test_quant_gpu.py's fp16 bound plus that term weighted by |W|, computed
from the activations each call really multiplies (x, silu(gate) * up, or the normalized h): every 64-channel window
aligned to 64 contains the kernel's step, so its amax bounds the step's. Relative L2 error <= 2e-2 (int8 rounding
alone gives about 6e-3 on Gaussian activations). Outputs are poisoned (NaN in the allocator) before each call.
"""

from __future__ import annotations

import pytest
import torch
from kernels_cases import NATIVE_GPU, poison

from revolta_kernels import ops, ops_quant, tuning
from revolta_kernels.reference import norm as ref_norm
from revolta_kernels.reference import quant as rq

pytestmark = NATIVE_GPU

XQ = {"int8_activations": True}


@pytest.fixture(params=[0, 1], ids=["split-k", "split-k-free"])
def kernel(request):
    # 0: the split-K kernel for every shape; 1: the split-K-free kernel wherever it exists (int4 g128, K % 1024 == 0,
    # K <= 4096, N % 32 == 0, no fused SiLU), the split-K kernel elsewhere.
    tuning.quant_tune(gemv_full=request.param)
    yield
    tuning.quant_tune()


def make_weights(k: int, n: int, group: int, seed: int, bits: int = 4):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    pack = 32 // bits
    qweight = torch.randint(-(2**31), 2**31 - 1, (k // pack, n), dtype=torch.int32, device="cuda", generator=gen)
    qzeros = torch.randint(-(2**31), 2**31 - 1, (k // group, n // pack), dtype=torch.int32, device="cuda",
                           generator=gen)
    scales = (torch.rand(k // group, n, device="cuda", generator=gen) * 0.01 + 1e-3).half()
    return qweight, scales, qzeros, gen


def assert_within_int8_bound(got: torch.Tensor, a: torch.Tensor, wd: torch.Tensor) -> None:
    """got ~ a @ wd, with a's 64-channel windows rounded to int8 (see the module docstring)."""
    m, k = a.shape
    af = a.float()
    pad = (-k) % 64
    windows = torch.nn.functional.pad(af.abs(), (0, pad)).view(m, -1, 64)
    half_step = (windows.amax(dim=-1, keepdim=True) / 254).expand(-1, -1, 64).reshape(m, -1)[:, :k]
    ref = af @ wd
    bound = 2e-3 * (af.abs() @ wd.abs()) + 2e-3 * ref.abs() + 1.02 * (half_step @ wd.abs())
    err = (got.float() - ref).abs()
    assert got.dtype == torch.float16 and got.shape == ref.shape
    assert bool(torch.isfinite(got).all())
    assert bool((err <= bound).all()), f"max excess {float((err - bound).max())}"
    assert float(torch.linalg.norm(got.float() - ref) / torch.linalg.norm(ref)) < 2e-2


SHAPES = [  # (K, N, group, zero offset): Llama-8B, Qwen 27B-class, group 32 (4-row steps), 64, a non-power-of-two
    (4096, 14336, 128, 0), (14336, 4096, 128, 0), (4096, 4096, 128, 0), (5120, 27648, 128, 0),
    (27648, 5120, 128, 0), (4096, 4096, 32, 1), (4096, 6144, 64, 1), (192, 64, 96, 0), (96, 200, 32, 0),
    (4096, 136, 4096, 0),
]


@pytest.mark.parametrize("m", [1, 2, 3, 5, 8])
@pytest.mark.parametrize(("k", "n", "group", "offset"), SHAPES)
def test_int8_activations_match_reference(kernel, m, k, n, group, offset):
    qweight, scales, qzeros, gen = make_weights(k, n, group, seed=m + k + n)
    x = torch.randn(m, k, device="cuda", generator=gen).half()
    poison(m * n)
    got = ops_quant.quant_matmul(x, qweight, scales, qzeros, 4, group, offset, **XQ)
    assert_within_int8_bound(got, x, rq.dequantize(qweight, scales, qzeros, 4, group, offset))


@pytest.mark.parametrize("m", [1, 2, 5, 8])
@pytest.mark.parametrize(("k", "n", "group", "offset"), [(4096, 4096, 128, 1), (14336, 4096, 32, 0), (160, 40, 32, 1)])
def test_int8_weights_with_int8_activations(kernel, m, k, n, group, offset):
    # int8 weights: one dp4a per packed word; a step of 8 packed rows spans 32 channels (16 with 4-row steps)
    qweight, scales, qzeros, gen = make_weights(k, n, group, seed=3 * m + k + n, bits=8)
    x = torch.randn(m, k, device="cuda", generator=gen).half()
    poison(m * n)
    got = ops_quant.quant_matmul(x, qweight, scales, qzeros, 8, group, offset, **XQ)
    assert_within_int8_bound(got, x, rq.dequantize(qweight, scales, qzeros, 8, group, offset))


@pytest.mark.parametrize("act", ["plain", "silu", "norm"])
@pytest.mark.parametrize("m", [1, 2, 8])
@pytest.mark.parametrize(("k", "n", "bits", "group"), [(4096, 14336, 4, 128), (14336, 4096, 4, 128),
                                                       (2048, 1024, 8, 64)])
def test_int8_activations_with_act_order(kernel, m, k, n, bits, group, act):
    """Act-order (x_order): the gathering kernel quantizes the rows it gathered, so the windows run over the
    channels in the weight's row order."""
    qweight, scales, qzeros, gen = make_weights(k, n, group, seed=k + m + bits, bits=bits)
    order = torch.randperm(k, device="cuda", generator=gen).to(torch.int32)
    x = (torch.randn(m, 2 * k if act == "silu" else k, device="cuda", generator=gen) * 3).half()
    poison(m * (n + k))
    if act == "plain":
        y, a = ops_quant.quant_matmul(x, qweight, scales, qzeros, bits, group, 0, order, **XQ), x
    elif act == "silu":
        y = ops_quant.quant_matmul_silu(x, qweight, scales, qzeros, bits, group, 0, order, **XQ)
        a = ops.silu_and_mul(x)
    else:
        res = (torch.randn(m, k, device="cuda", generator=gen) * 5).half()
        w = (torch.rand(k, device="cuda", generator=gen) * 1.5 + 0.25).half()
        y, h = ops_quant.quant_matmul_add_rms_norm(x, res, w, 1e-5, False, qweight, scales, qzeros, bits, group, 0,
                                                   order, **XQ)
        a, h_ref = ref_norm.fused_add_rms_norm(x, res, w, 1e-5, False)
        assert torch.equal(h, h_ref)
    assert_within_int8_bound(y, a[..., order.long()], rq.dequantize(qweight, scales, qzeros, bits, group, 0))


@pytest.mark.parametrize("m", [1, 2, 4])
@pytest.mark.parametrize(("k", "n"), [(14336, 4096), (3072, 1000)])
def test_int8_activations_with_fused_silu(kernel, m, k, n):
    qweight, scales, qzeros, gen = make_weights(k, n, 128, seed=k + m)
    gate_up = (torch.randn(m, 2 * k, device="cuda", generator=gen) * 2).half()
    poison(m * n)
    got = ops_quant.quant_matmul_silu(gate_up, qweight, scales, qzeros, 4, 128, 0, **XQ)
    g, u = gate_up[:, :k].float(), gate_up[:, k:].float()
    a = (g * torch.sigmoid(g) * u).half()
    assert_within_int8_bound(got, a, rq.dequantize(qweight, scales, qzeros, 4, 128, 0))


@pytest.mark.parametrize("m", [1, 2, 8])
@pytest.mark.parametrize(("k", "n", "group"), [(4096, 28672, 128), (5120, 27648, 128), (4096, 6144, 32)])
@pytest.mark.parametrize("residual", [True, False])
def test_int8_activations_with_fused_norm(kernel, m, k, n, group, residual):
    qweight, scales, qzeros, gen = make_weights(k, n, group, seed=n + m)
    x = (torch.randn(m, k, device="cuda", generator=gen) * 3).half()
    res = (torch.randn(m, k, device="cuda", generator=gen) * 5).half() if residual else None
    w = (torch.rand(k, device="cuda", generator=gen) * 1.5 + 0.25).half()
    poison(m * (n + k))
    y, h = ops_quant.quant_matmul_add_rms_norm(x, res, w, 1e-5, False, qweight, scales, qzeros, 4, group, 0, **XQ)
    if res is None:
        normed, h_ref = ref_norm.rms_norm(x, w, 1e-5, False), x
    else:
        normed, h_ref = ref_norm.fused_add_rms_norm(x, res, w, 1e-5, False)
    assert torch.equal(h, h_ref)
    assert_within_int8_bound(y, normed, rq.dequantize(qweight, scales, qzeros, 4, group, 0))


def test_int8_activations_large_values_and_zero_windows(kernel):
    qweight, scales, qzeros, gen = make_weights(4096, 1024, 128, seed=3)
    x = torch.randn(2, 4096, device="cuda", generator=gen).half()
    x[:, ::97] = 30000.0
    x[1, 5::331] = -60000.0
    x[0, 128:512] = 0.0  # whole steps of zeros: scale 0, no division by it
    scales.mul_(0.1)
    poison(2 * 1024)
    got = ops_quant.quant_matmul(x, qweight, scales, qzeros, 4, 128, 0, **XQ)
    assert_within_int8_bound(got, x, rq.dequantize(qweight, scales, qzeros, 4, 128, 0))


@pytest.mark.parametrize("n", [14336, 4096])  # the split-K and (by the built-in rule) the split-K-free kernel
def test_argument_switches_the_kernel_and_graph_replay_repeats_it(n):
    """int8_activations picks the dp4a kernel per call: the plan reports it, the result differs from the fp16 path,
    a call without it in between still gets the fp16 path, and a captured graph replays each call as captured."""
    qweight, scales, qzeros, gen = make_weights(4096, n, 128, seed=11)
    x = torch.randn(1, 4096, device="cuda", generator=gen).half()
    plan = tuning.quant_plan(1, n, 4096, 4, 128, x.device)
    assert plan["full"] == (n <= 8192) and plan["int8_x"] == 0
    assert tuning.quant_plan(1, n, 4096, 4, 128, x.device, int8_activations=True) == {**plan, "int8_x": 1}
    assert tuning.quant_plan(9, n, 4096, 4, 128, x.device, int8_activations=True)["kernel"] == "gemm"  # M > 8
    fp16_path = ops_quant.quant_matmul(x, qweight, scales, qzeros, 4, 128, 0)
    eager = ops_quant.quant_matmul(x, qweight, scales, qzeros, 4, 128, 0, **XQ)
    assert not torch.equal(eager, fp16_path), "int8_activations did not change the kernel"
    assert torch.equal(ops_quant.quant_matmul(x, qweight, scales, qzeros, 4, 128, 0), fp16_path)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = ops_quant.quant_matmul(x, qweight, scales, qzeros, 4, 128, 0, **XQ)
        plain = ops_quant.quant_matmul(x, qweight, scales, qzeros, 4, 128, 0)
    for _ in range(3):
        out.fill_(float("nan"))
        plain.fill_(float("nan"))
        graph.replay()
        assert torch.equal(out, eager) and torch.equal(plain, fp16_path)


def test_reference_models_the_kernel_rounding():
    """The op's reference (int8_activations on the CPU) rounds as the kernel does, within the kernel's bound."""
    qweight, scales, qzeros, gen = make_weights(4096, 4096, 128, seed=12)
    x = torch.randn(2, 4096, device="cuda", generator=gen).half()
    got = ops_quant.quant_matmul(x, qweight, scales, qzeros, 4, 128, 0, **XQ)
    want = ops_quant.quant_matmul(x.cpu(), qweight.cpu(), scales.cpu(), qzeros.cpu(), 4, 128, 0, **XQ)
    assert_within_int8_bound(got, x, rq.dequantize(qweight, scales, qzeros, 4, 128, 0))
    assert float(torch.linalg.norm(got.cpu().float() - want.float()) / torch.linalg.norm(want.float())) < 1e-2
