"""The runner's packed input buffer: what one step's views hold, whatever earlier steps left behind."""

from __future__ import annotations

import torch

from revolta_engine.core.request import Request
from revolta_engine.core.scheduler import ScheduledRequest
from revolta_engine.sampling_params import SamplingParams
from revolta_engine.worker.input_buffers import Layout, StepBuffers
from revolta_engine.worker.model_runner import ModelRunner


def test_layout_fields_are_disjoint_and_aligned():
    layout = Layout(tokens=7, seqs=3, width=5, rows=2, feeds=1)
    o = layout.offsets
    names = ["input_ids", "positions", "slot_mapping", "query_start_loc", "context_lens", "block_tables",
             "logits_indices", "feed_dst", "feed_src", "end"]
    starts = [o[n] for n in names]
    assert starts == sorted(starts) and all(s % 16 == 0 for s in starts)
    views = StepBuffers(16, 4, 8, torch.device("cpu")).views(layout)
    assert views["block_tables"].shape == (3, 5) and views["input_ids"].dtype == torch.int64


def test_prepare_packs_tokens_slots_and_zero_padded_block_tables():
    runner = ModelRunner(None, [], block_size=4, device=torch.device("cpu"), max_num_tokens=32, max_num_seqs=4,
                         max_model_len=64)
    for host in runner.buffers.host_np:
        host.fill(10**6)  # whatever an earlier, differently shaped step left there
    a = Request("a", list(range(10, 16)), SamplingParams(max_tokens=4), 4, {0})  # 6-token prompt
    b = Request("b", [7, 8, 9], SamplingParams(max_tokens=4), 4, {0})
    b.num_computed_tokens = 2  # one token left: a decode-like row
    batch = runner.prepare([ScheduledRequest(a, 6), ScheduledRequest(b, 1)], [[3, 5], [9]])
    assert batch.input_ids.tolist() == [10, 11, 12, 13, 14, 15, 9]
    assert batch.positions.tolist() == [0, 1, 2, 3, 4, 5, 2]
    assert batch.attn.slot_mapping.tolist() == [12, 13, 14, 15, 20, 21, 38]
    assert batch.attn.block_tables.tolist() == [[3, 5], [9, 0]]
    assert batch.attn.context_lens.tolist() == [6, 3]
    assert batch.attn.query_start_loc.tolist() == [0, 6, 7]
    assert batch.logits_indices.tolist() == [5, 6]
