"""GPU tests of the native greedy argmax against torch.argmax (fresh random rows, outputs poisoned first)."""

from __future__ import annotations

import pytest
import torch
from kernels_cases import NATIVE_GPU

from revolta_kernels import ops

pytestmark = NATIVE_GPU


def _native(x: torch.Tensor) -> torch.Tensor:
    from revolta_kernels import native_ops

    return native_ops.argmax(x)


@pytest.mark.parametrize("rows", [1, 3, 64])
@pytest.mark.parametrize("cols", [1, 7, 1000, 8192, 8193, 128256, 151936, 248320])
def test_argmax_random(rows, cols):
    for _ in range(3):
        x = torch.randn(rows, cols, device="cuda") * 5
        torch.testing.assert_close(ops.argmax(x), x.argmax(dim=-1), rtol=0, atol=0)


def test_argmax_ties_pick_the_first_index():
    x = torch.zeros(4, 100_000, device="cuda")
    x[0, [17, 99_000]] = 3.0       # equal maxima in different blocks
    x[1, [50_000, 50_001]] = 2.0   # in one block
    x[2] = -1.0
    x[2, 99] = -0.0
    x[2, 123] = 0.0                # -0.0 == +0.0: the first of them wins
    x[3] = float("-inf")           # all -inf: index 0
    assert _native(x).tolist() == x.argmax(dim=-1).tolist() == [17, 50_000, 99, 0]


def test_argmax_nan_wins_like_torch():
    x = torch.randn(3, 70_000, device="cuda")
    x[0, 5000] = float("nan")
    x[0, 60_000] = float("nan")
    x[1, 1] = float("inf")
    x[2, 69_999] = float("nan")
    x[2, 0] = float("inf")
    assert _native(x).tolist() == x.argmax(dim=-1).tolist()


def test_argmax_unaligned_rows_and_3d():
    base = torch.randn(5 * 1001 + 1, device="cuda")
    x = base[1:].view(5, 1001)      # rows start off 16-byte alignment: the scalar path
    assert _native(x).tolist() == x.argmax(dim=-1).tolist()
    y = torch.randn(2, 3, 4096, device="cuda")
    assert _native(y).tolist() == y.argmax(dim=-1).tolist()


def test_argmax_repeated_calls_reuse_clean_counters():
    for cols in (128256, 37, 250_000, 4):
        x = torch.randn(8, cols, device="cuda")
        assert _native(x).tolist() == x.argmax(dim=-1).tolist()


def test_argmax_in_a_cuda_graph():
    x = torch.randn(2, 128256, device="cuda")
    ops.argmax(x)  # warm-up outside capture (grows the shared counter buffer)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = ops.argmax(x)
    for _ in range(3):
        x.copy_(torch.randn_like(x))
        g.replay()
        torch.cuda.synchronize()
        assert out.tolist() == x.argmax(dim=-1).tolist()
