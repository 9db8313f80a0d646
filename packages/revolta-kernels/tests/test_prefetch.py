"""revolta::l2_prefetch: argument checks and opcheck on the CPU; on a GPU (marker ``gpu``) it runs eagerly and
inside a CUDA graph branch without changing a byte of what it prefetches."""

from __future__ import annotations

import pytest
import torch

import revolta_kernels
from revolta_kernels import ops_memory


def test_checks_its_arguments():
    t = torch.zeros(64, dtype=torch.float16)
    with pytest.raises(ValueError, match="2 tensors but 1 byte counts"):
        ops_memory.l2_prefetch([t, t], [16])
    with pytest.raises(ValueError, match="holds 128 bytes; cannot prefetch 144"):
        ops_memory.l2_prefetch([t], [144])
    with pytest.raises(ValueError, match="cannot prefetch -16"):
        ops_memory.l2_prefetch([t], [-16])
    with pytest.raises(ValueError, match="at most 8 tensors"):
        ops_memory.l2_prefetch([t] * 9, [16] * 9)
    with pytest.raises(ValueError, match="tensor 1 is not contiguous"):
        ops_memory.l2_prefetch([t, torch.zeros(8, 8)[:, ::2]], [16, 16])
    ops_memory.l2_prefetch([t, t], [128, 0])  # a whole tensor and nothing are both fine


def test_opcheck():
    t = torch.randn(32, 16)
    torch.library.opcheck(ops_memory.l2_prefetch, ([t, t[:4]], [t.numel() * 4, 64]))


needs_gpu = pytest.mark.skipif(not torch.cuda.is_available() or not revolta_kernels.native_available(),
                               reason=f"needs a CUDA GPU and the native library ({revolta_kernels.native_status()})")


def _tensors():
    g = torch.Generator(device="cuda").manual_seed(7)
    big = torch.randint(-(2**31), 2**31 - 1, (3000, 1536), dtype=torch.int32, device="cuda", generator=g)
    scales = torch.rand(24, 12288, device="cuda", generator=g).half()
    odd = torch.rand(1001, device="cuda", generator=g).half()  # 2002 bytes: the last partial 16 are skipped
    unaligned = odd[1:]  # not 16-byte aligned: skipped
    return [big, scales, odd, unaligned]


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("share", [1.0, 0.37])
def test_gpu_eager_leaves_data_unchanged(share):
    tensors = _tensors()
    before = [t.clone() for t in tensors]
    nbytes = [int(t.numel() * t.element_size() * share) for t in tensors]
    ops_memory.l2_prefetch(tensors, nbytes)
    torch.cuda.synchronize()
    for t, b in zip(tensors, before, strict=True):
        assert torch.equal(t, b)


@pytest.mark.gpu
@needs_gpu
def test_gpu_graph_branch_prefetch_keeps_the_main_chain_exact():
    """A captured main chain (x -> 2x + 1, 5 times) with the prefetch forked beside it after the first op and
    joined at the end replays to the exact result, and the prefetched tensors stay unchanged."""
    tensors = _tensors()
    before = [t.clone() for t in tensors]
    nbytes = [t.numel() * t.element_size() for t in tensors]
    x = torch.randn(4096, device="cuda")
    side = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        y = x * 2 + 1
        main = torch.cuda.current_stream()
        side.wait_stream(main)
        with torch.cuda.stream(side):
            ops_memory.l2_prefetch(tensors, nbytes)
        for _ in range(4):
            y = y * 2 + 1
        main.wait_stream(side)
    for _ in range(3):
        x.copy_(torch.randn(4096, device="cuda"))
        graph.replay()
        want = x.clone()
        for _ in range(5):
            want = want * 2 + 1
        torch.testing.assert_close(y, want, rtol=0, atol=0)
    for t, b in zip(tensors, before, strict=True):
        assert torch.equal(t, b)
