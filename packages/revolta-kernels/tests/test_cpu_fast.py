"""The lean float32 CPU paths give exactly the references' results, and fall back for everything else."""

from __future__ import annotations

import pytest
import torch

from revolta_kernels import ops, reference
from revolta_kernels.reference import cpu_fast


@pytest.mark.parametrize("zero_centered", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_norm_matches_reference(zero_centered, dtype):
    x, w = torch.randn(5, 96).to(dtype), torch.randn(96).to(dtype)
    want = reference.rms_norm(x, w, 1e-6, zero_centered)
    got = cpu_fast.rms_norm(x, w, 1e-6, zero_centered)
    assert got.dtype == dtype
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("zero_centered", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_fused_add_rms_norm_matches_reference(zero_centered, dtype):
    x, r, w = torch.randn(3, 64).to(dtype), torch.randn(3, 64).to(dtype), torch.randn(64).to(dtype)
    want_normed, want_res = reference.fused_add_rms_norm(x, r, w, 1e-5, zero_centered)
    normed, res = cpu_fast.fused_add_rms_norm(x, r, w, 1e-5, zero_centered)
    assert torch.equal(res, want_res)
    torch.testing.assert_close(normed, want_normed, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_silu_and_mul_matches_reference(dtype):
    x = torch.randn(4, 2 * 40).to(dtype)
    assert torch.equal(cpu_fast.silu_and_mul(x), reference.silu_and_mul(x))


def _cache(rot_dim: int, positions: int = 40) -> torch.Tensor:
    inv_freq = 1.0 / 10000.0 ** (torch.arange(0, rot_dim, 2).float() / rot_dim)
    angles = torch.arange(positions).float()[:, None] * inv_freq[None]
    return torch.cat((angles.cos(), angles.sin()), dim=-1)


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("tokens", [1, 5])
def test_rotary_matches_reference(fused, tokens):
    h, hkv, d = 6, 2, 32
    pos = torch.randint(0, 40, (tokens,))
    if fused:  # q, k, v split from one projection output, as the models do
        qkv = torch.randn(tokens, (h + 2 * hkv) * d)
        q, k, _ = qkv.split([h * d, hkv * d, hkv * d], dim=-1)
        q, k = q.view(tokens, h, d), k.view(tokens, hkv, d)
        assert cpu_fast._joint_heads(q, k).data_ptr() == q.data_ptr()  # no copy
    else:
        q, k = torch.randn(tokens, h, d), torch.randn(tokens, hkv, d)
    want_q, want_k = reference.rotary_embedding(pos, q, k, _cache(d), True)
    got_q, got_k = ops.rotary_embedding(pos, q, k, _cache(d), True)
    assert torch.equal(got_q, want_q) and torch.equal(got_k, want_k)


@pytest.mark.parametrize("is_neox,rot_dim", [(False, 32), (True, 16)])
def test_rotary_other_variants_fall_back(is_neox, rot_dim):
    pos = torch.tensor([3, 7])
    q, k = torch.randn(2, 4, 32), torch.randn(2, 2, 32)
    want = reference.rotary_embedding(pos, q, k, _cache(rot_dim), is_neox)
    got = cpu_fast.rotary_embedding(pos, q, k, _cache(rot_dim), is_neox)
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))


def test_joint_heads_copies_unrelated_tensors():
    q, k = torch.randn(3, 4, 8), torch.randn(3, 2, 8)
    joint = cpu_fast._joint_heads(q, k)
    assert joint.shape == (3, 6, 8)
    assert torch.equal(joint[:, :4], q) and torch.equal(joint[:, 4:], k)
