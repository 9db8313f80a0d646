"""The decode CUDA graphs' buckets: which batch sizes and block-table widths are captured (no GPU needed)."""

from __future__ import annotations

import pytest

from revolta_engine.worker.cuda_graph import context_buckets, default_buckets


@pytest.mark.parametrize(("max_blocks", "want"), [
    (40, [40]),
    (64, [64]),
    (68, [68]),
    (80, [64, 80]),
    (128, [64, 128]),
    (260, [64, 128, 260]),
    (516, [64, 128, 256, 516]),
    (2048, [64, 128, 256, 512, 1024, 2048]),
])
def test_context_widths_double_up_to_the_maximum(max_blocks, want):
    assert context_buckets(max_blocks) == want


@pytest.mark.parametrize("max_blocks", [64, 65, 300, 516, 2048, 8192])
def test_every_context_gets_a_table_at_most_two_and_a_half_times_its_blocks(max_blocks):
    widths = context_buckets(max_blocks)
    assert widths == sorted(set(widths)) and widths[-1] == max_blocks
    for blocks in range(1, max_blocks + 1):
        width = next(w for w in widths if w >= blocks)
        assert 2 * width <= max(2 * widths[0], 5 * blocks), (blocks, width)


def test_a_wider_factor_is_still_available():
    assert context_buckets(2048, factor=4) == [64, 256, 1024, 2048]


def test_batch_buckets_follow_vllm():
    assert default_buckets(1) == [1]
    assert default_buckets(6) == [1, 2, 4, 6]
    assert default_buckets(20) == [1, 2, 4, 8, 16, 20]
