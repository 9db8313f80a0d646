"""``revolta::quant_qkv_rope_cache`` on the GPU: the q/k/v projection whose epilogue rotates q and k and writes k
and v into the fp16 paged cache (csrc/quant_gemv_rope.cuh), against the same op's two native steps
(``quant_matmul_add_rms_norm`` then ``rotary_and_cache``) and against a float64 oracle.

Bounds: ``h`` and the cached values bit-for-bit equal to the two-step path (the same sums, rounded alike); q and
the cached keys within 2 fp16 ulps of it (the rotation is the rotary kernel's expression, compiled in another
kernel); q against the oracle (dequantized W, rotary in float64) within relative L2 5e-3. Cache slots the call
does not own keep their poison. Outputs are poisoned (NaN in the allocator) before each call.
"""

from __future__ import annotations

import pytest
import torch
from kernels_cases import NATIVE_GPU
from quant_rope_cases import BLOCK_SIZE, BLOCKS, EPS, SENTINEL, make_case, oracle

from revolta_kernels import native_qkv_rope, ops, ops_quant

pytestmark = NATIVE_GPU


def two_steps(x, res, w, zc, qweight, scales, qzeros, positions, cos_sin, neox, heads, kc, vc, slots, int8x=False):
    qkv, h = ops_quant.quant_matmul_add_rms_norm(x, res, w, EPS, zc, qweight, scales, qzeros, 4, 128, 0, None, int8x)
    q, k, v = ops_quant.split_qkv(qkv, heads, kc.shape[1], kc.shape[-1])
    return ops.rotary_and_cache(positions, q, k, v, cos_sin, neox, kc, vc, slots), h


def ulps_apart(a: torch.Tensor, b: torch.Tensor) -> int:
    ia, ib = a.view(torch.int16).int(), b.view(torch.int16).int()
    ia = torch.where(ia < 0, -32768 - ia, ia)  # sign-magnitude -> ordered integers
    ib = torch.where(ib < 0, -32768 - ib, ib)
    return int((ia - ib).abs().max())


CASES = [  # (tokens, K, heads, kv heads, head_dim, rot_dim, neox, residual, zero-centred, slots)
    (1, 4096, 32, 8, 128, 128, True, True, False, [37]),  # Llama-3.1-8B decode
    (2, 4096, 32, 8, 128, 128, True, True, False, [5, -1]),  # a padding token: its k/v are not cached
    (1, 4096, 32, 8, 128, 128, True, False, True, [90]),  # no residual (first layer), zero-centred weight
    (2, 2048, 16, 4, 128, 128, False, True, False, [3, 64]),  # gpt-j pairs
    (2, 1024, 8, 2, 128, 64, True, True, False, [17, 18]),  # partial rotary: channels past 64 are copied
    (1, 2048, 16, 16, 64, 64, True, True, False, [95]),  # MHA, head_dim 64
    (1, 2048, 8, 4, 256, 256, True, True, False, [0]),  # head_dim 256
]


@pytest.mark.parametrize("int8x", [False, True], ids=["fp16-x", "int8-x"])  # int8 activations with dp4a
@pytest.mark.parametrize(("m", "k", "heads", "kv_heads", "d", "rot", "neox", "residual", "zc", "slots"), CASES)
def test_fused_qkv_rope_matches_two_steps_and_oracle(int8x, m, k, heads, kv_heads, d, rot, neox, residual, zc, slots):
    # int8-x: both paths round the activations alike (same rows, same groups), so they still agree to 2 ulps; the
    # oracle bound widens by the int8 rounding (test_quant_xq_gpu.py).
    x, res, w, qweight, scales, qzeros, positions, cos_sin, kc, vc, slot_t = make_case(
        m, k, heads, kv_heads, d, rot, seed=k + heads + m, residual=residual, slots=slots)
    kc2, vc2 = kc.clone(), vc.clone()
    torch.full((m * (heads + 2 * kv_heads) * d * 4,), float("nan"), device="cuda")  # poison the allocator
    fused = native_qkv_rope.fused_launch(x, res, w, EPS, zc, qweight, scales, qzeros, 4, 128, 0, positions, cos_sin,
                                         neox, heads, kc, vc, slot_t, None, int8x)
    assert fused is not None, "the fused kernel should take this call"
    q, h = fused
    q2, h2 = two_steps(x, res, w, zc, qweight, scales, qzeros, positions, cos_sin, neox, heads, kc2, vc2, slot_t,
                       int8x)
    torch.cuda.synchronize()
    assert q.shape == (m, heads, d) and bool(torch.isfinite(q).all())
    assert torch.equal(h, h2)
    assert ulps_apart(q, q2) <= 2, f"q differs from the two-step path by {ulps_apart(q, q2)} ulps"
    assert torch.equal(vc, vc2), "cached values differ from the two-step path"
    assert ulps_apart(kc, kc2) <= 2, "cached keys differ from the two-step path"
    written = torch.zeros(BLOCKS * BLOCK_SIZE, dtype=torch.bool, device="cuda")
    written[slot_t[slot_t >= 0]] = True
    untouched = ~written.view(BLOCKS, 1, BLOCK_SIZE, 1).expand_as(kc)
    assert bool((kc[untouched] == SENTINEL).all()) and bool((vc[untouched] == SENTINEL).all())
    assert bool((kc[~untouched] != SENTINEL).all())
    ref = oracle(x, res, w, zc, qweight, scales, qzeros, positions, cos_sin, neox, heads, kv_heads, d)[0]
    rel = float(torch.linalg.norm(q.double() - ref) / torch.linalg.norm(ref))
    assert rel < (2e-2 if int8x else 5e-3), rel


@pytest.mark.parametrize(("m", "k", "heads", "kv_heads", "d"), [(3, 4096, 32, 8, 128), (1, 3584, 28, 4, 128)])
def test_calls_the_kernel_does_not_take_run_the_two_steps(m, k, heads, kv_heads, d):
    """Three tokens (above the kernel's two) and K = 3584 (Qwen2.5-7B; the split-K-free kernel needs K % 1024 == 0)
    go through the op's fallback with the same results as the two native steps."""
    k = k // 128 * 128
    x, res, w, qweight, scales, qzeros, positions, cos_sin, kc, vc, slot_t = make_case(
        m, k, heads, kv_heads, d, d, seed=1, residual=True, slots=list(range(7, 7 + m)))
    assert native_qkv_rope.fused_launch(x, res, w, EPS, False, qweight, scales, qzeros, 4, 128, 0, positions,
                                        cos_sin, True, heads, kc.clone(), vc.clone(), slot_t) is None
    kc2, vc2 = kc.clone(), vc.clone()
    q, h = ops_quant.quant_qkv_rope_cache(x, res, w, EPS, False, qweight, scales, qzeros, 4, 128, 0, positions,
                                          cos_sin, True, heads, kc, vc, slot_t, None, None)
    q2, h2 = two_steps(x, res, w, False, qweight, scales, qzeros, positions, cos_sin, True, heads, kc2, vc2, slot_t)
    assert torch.equal(q, q2) and torch.equal(h, h2) and torch.equal(kc, kc2) and torch.equal(vc, vc2)


def test_op_dispatches_to_the_fused_kernel():
    """The registered CUDA op gives the fused kernel's results where it takes the call."""
    args = make_case(1, 4096, 32, 8, 128, 128, seed=4, residual=True, slots=[50])
    x, res, w, qweight, scales, qzeros, positions, cos_sin, kc, vc, slot_t = args
    kc2, vc2 = kc.clone(), vc.clone()
    q, h = ops_quant.quant_qkv_rope_cache(x, res, w, EPS, False, qweight, scales, qzeros, 4, 128, 0, positions,
                                          cos_sin, True, 32, kc, vc, slot_t, None, None)
    fused = native_qkv_rope.fused_launch(x, res, w, EPS, False, qweight, scales, qzeros, 4, 128, 0, positions,
                                         cos_sin, True, 32, kc2, vc2, slot_t)
    assert fused is not None
    assert torch.equal(q, fused[0]) and torch.equal(h, fused[1]) and torch.equal(kc, kc2) and torch.equal(vc, vc2)
