"""Act-order GPTQ (``x_order``) in the quantized ops on the GPU: the skinny kernels gather the activation's
channels while staging it (plain, SiLU-and-mul, residual add + RMSNorm, and the q/k/v kernel with the rotary + cache
epilogue); above 8 rows the op gathers before the tensor-core GEMM.

Oracle: the activation in channel order from the reference ops, its channels taken in ``x_order``, times the
dequantized weight in float64. Bound as test_quant_gpu.py's: |err| <= 2e-3 (|a| @ |W|) + 2e-3 |ref| elementwise and
relative L2 error <= 5e-3; ``h`` bit for bit equal to the reference's. Outputs are poisoned (NaN in the allocator)
before each call; every case also checks that the order changed the result (a kernel ignoring it fails).
"""

from __future__ import annotations

import pytest
import torch
from kernels_cases import NATIVE_GPU
from quant_rope_cases import EPS, make_case, oracle

from revolta_kernels import native_qkv_rope, native_quant, ops, ops_quant
from revolta_kernels.reference import norm as ref_norm
from revolta_kernels.reference import quant as rq

pytestmark = NATIVE_GPU

SHAPES = [  # K, N, bits, group: the split-K-free kernel (4096 x 4096 / 6144), one split, many splits, int8, g32
    (4096, 4096, 4, 128), (4096, 6144, 4, 128), (4096, 14336, 4, 128), (14336, 4096, 4, 128), (2048, 1024, 8, 64),
    (1024, 512, 4, 32),
]


def weights(k: int, n: int, bits: int, group: int, gen: torch.Generator):
    qweight = torch.randint(-(2**31), 2**31 - 1, (k * bits // 32, n), dtype=torch.int32, device="cuda", generator=gen)
    qzeros = torch.randint(-(2**31), 2**31 - 1, (k // group, n * bits // 32), dtype=torch.int32, device="cuda",
                           generator=gen)
    scales = (torch.rand(k // group, n, device="cuda", generator=gen) * 0.01 + 1e-3).half()
    return qweight, scales, qzeros


def within_bound(y: torch.Tensor, a: torch.Tensor, wd: torch.Tensor) -> None:
    ref = a.double() @ wd.double()
    scale = a.double().abs() @ wd.double().abs()
    err = (y.double() - ref).abs()
    assert bool(torch.isfinite(y).all()), "non-finite output"
    worst = float((err - 2e-3 * scale - 2e-3 * ref.abs()).max())
    assert worst <= 0, f"elementwise bound exceeded by {worst}"
    rel = float(torch.linalg.norm(y.double() - ref) / torch.linalg.norm(ref))
    assert rel <= 5e-3, rel


def differs(y: torch.Tensor, y_unordered: torch.Tensor) -> None:
    rel = float(torch.linalg.norm(y.double() - y_unordered.double()) / torch.linalg.norm(y_unordered.double()))
    assert rel > 0.1, f"the order changed the result by only {rel}"


@pytest.mark.parametrize("act", ["plain", "silu", "norm", "norm_no_residual"])
@pytest.mark.parametrize("m", [1, 2, 5, 8, 40])
@pytest.mark.parametrize(("k", "n", "bits", "group"), SHAPES)
def test_gathered_activation_matches_oracle(k, n, bits, group, m, act):
    gen = torch.Generator(device="cuda").manual_seed(k + n + m + bits)
    qweight, scales, qzeros = weights(k, n, bits, group, gen)
    order = torch.randperm(k, device="cuda", generator=gen).to(torch.int32)
    wd = rq.dequantize(qweight, scales, qzeros, bits, group, 0)
    x = (torch.randn(m, 2 * k if act == "silu" else k, device="cuda", generator=gen) * 3).half()
    torch.full((m * (n + k) * 4,), float("nan"), device="cuda")  # poison the allocator
    if act == "plain":
        y = ops_quant.quant_matmul(x, qweight, scales, qzeros, bits, group, 0, order)
        y0 = ops_quant.quant_matmul(x, qweight, scales, qzeros, bits, group, 0)
        a = x
    elif act == "silu":
        y = ops_quant.quant_matmul_silu(x, qweight, scales, qzeros, bits, group, 0, order)
        y0 = ops_quant.quant_matmul_silu(x, qweight, scales, qzeros, bits, group, 0)
        a = ops.silu_and_mul(x)
    else:
        res = (torch.randn(m, k, device="cuda", generator=gen) * 5).half() if act == "norm" else None
        w = (torch.rand(k, device="cuda", generator=gen) * 1.5 + 0.25).half()
        y, h = ops_quant.quant_matmul_add_rms_norm(x, res, w, EPS, False, qweight, scales, qzeros, bits, group, 0,
                                                   order)
        y0, h0 = ops_quant.quant_matmul_add_rms_norm(x, res, w, EPS, False, qweight, scales, qzeros, bits, group, 0)
        a, h_ref = (ref_norm.fused_add_rms_norm(x, res, w, EPS, False) if res is not None
                    else (ref_norm.rms_norm(x, w, EPS, False), x))
        assert torch.equal(h, h_ref) and torch.equal(h, h0), "h must stay in channel order, bit for bit"
    torch.cuda.synchronize()
    within_bound(y, a[..., order.long()], wd)
    differs(y, y0)


@pytest.mark.parametrize("m", [1, 2, 5, 8, 40])
@pytest.mark.parametrize(("k", "n", "bits", "group"), SHAPES)
def test_order_code_hint_leaves_the_result_bit_for_bit(k, n, bits, group, m):
    """``order_code`` runs the gathering kernel without an order: the same sums in the same order as the plain
    kernel, so the outputs are equal bit for bit, and equal the oracle's."""
    gen = torch.Generator(device="cuda").manual_seed(7 * k + n + m)
    qweight, scales, qzeros = weights(k, n, bits, group, gen)
    wd = rq.dequantize(qweight, scales, qzeros, bits, group, 0)
    x = (torch.randn(m, 2 * k, device="cuda", generator=gen) * 3).half()
    torch.full((m * (n + k) * 4,), float("nan"), device="cuda")  # poison the allocator
    y = ops_quant.quant_matmul_silu(x, qweight, scales, qzeros, bits, group, 0, None, True)
    y_plain = ops_quant.quant_matmul_silu(x, qweight, scales, qzeros, bits, group, 0)
    torch.cuda.synchronize()
    within_bound(y, ops.silu_and_mul(x), wd)
    assert torch.equal(y, y_plain)


def test_int64_and_misaligned_orders_are_accepted_and_wrong_sizes_rejected():
    gen = torch.Generator(device="cuda").manual_seed(3)
    qweight, scales, qzeros = weights(1024, 256, 4, 128, gen)
    x = torch.randn(2, 1024, device="cuda", generator=gen).half()
    order = torch.randperm(1024, device="cuda", generator=gen)
    y32 = ops_quant.quant_matmul(x, qweight, scales, qzeros, 4, 128, 0, order.to(torch.int32))
    y64 = ops_quant.quant_matmul(x, qweight, scales, qzeros, 4, 128, 0, order)
    shifted = torch.empty(1025, dtype=torch.int32, device="cuda")[1:]  # 4-byte but not 16-byte aligned
    shifted.copy_(order)
    y_shifted = ops_quant.quant_matmul(x, qweight, scales, qzeros, 4, 128, 0, shifted)
    assert torch.equal(y32, y64) and torch.equal(y32, y_shifted)
    with pytest.raises(ValueError, match="one index per input channel"):
        ops_quant.quant_matmul(x, qweight, scales, qzeros, 4, 128, 0, order[:512])


@pytest.mark.parametrize(("m", "k", "heads", "kv_heads", "d", "residual"),
                         [(1, 4096, 32, 8, 128, True), (2, 4096, 32, 8, 128, False), (1, 2048, 8, 4, 256, True)])
def test_qkv_rope_kernel_gathers_too(m, k, heads, kv_heads, d, residual):
    x, res, w, qweight, scales, qzeros, positions, cos_sin, kc, vc, slot_t = make_case(
        m, k, heads, kv_heads, d, d, seed=k + m, residual=residual, slots=list(range(3, 3 + m)))
    order = torch.randperm(k, device="cuda", generator=torch.Generator(device="cuda").manual_seed(m)).to(torch.int32)
    torch.full((m * (heads + 2 * kv_heads) * d * 4,), float("nan"), device="cuda")
    fused = native_qkv_rope.fused_launch(x, res, w, EPS, False, qweight, scales, qzeros, 4, 128, 0, positions, cos_sin,
                                         True, heads, kc, vc, slot_t, order)
    assert fused is not None, "the fused kernel should take an act-order call"
    q, h = fused
    torch.cuda.synchronize()
    q_ref, k_ref, v_ref = oracle(x, res, w, False, qweight, scales, qzeros, positions, cos_sin, True, heads, kv_heads,
                                 d, order)
    for got, ref in ((q, q_ref), (kc[slot_t // 16, :, slot_t % 16], k_ref), (vc[slot_t // 16, :, slot_t % 16], v_ref)):
        rel = float(torch.linalg.norm(got.double() - ref) / torch.linalg.norm(ref))
        assert rel < 5e-3, rel
    q_plain = oracle(x, res, w, False, qweight, scales, qzeros, positions, cos_sin, True, heads, kv_heads, d)[0]
    assert float(torch.linalg.norm(q.double() - q_plain) / torch.linalg.norm(q_plain)) > 0.1
    h_ref = ref_norm.fused_add_rms_norm(x, res, w, EPS, False)[1] if res is not None else x
    assert torch.equal(h, h_ref)


def test_graph_replay_of_gathering_kernels():
    """A captured act-order GEMV reads its order (and input) afresh on every replay."""
    gen = torch.Generator(device="cuda").manual_seed(11)
    qweight, scales, qzeros = weights(4096, 4096, 4, 128, gen)
    order = torch.randperm(4096, device="cuda", generator=gen).to(torch.int32)
    x = torch.randn(1, 4096, device="cuda", generator=gen).half()
    native_quant.quant_matmul(x, qweight, scales, qzeros, 4, 128, 0, order)  # workspace outside capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = ops_quant.quant_matmul(x, qweight, scales, qzeros, 4, 128, 0, order)
    wd = rq.dequantize(qweight, scales, qzeros, 4, 128, 0)
    for seed in (1, 2):
        x.copy_(torch.randn(1, 4096, device="cuda", generator=torch.Generator(device="cuda").manual_seed(seed)).half())
        graph.replay()
        torch.cuda.synchronize()
        within_bound(y, x[..., order.long()], wd)
