"""KV offload with the model split over two CPU ranks (gloo): every rank stores, finds and copies back its own
shard of each block, and a block comes back only when every rank still holds it intact."""

from __future__ import annotations

import multiprocessing

import pytest
from test_engine_offload import BLOCK, GREEDY, evict_first_then_reload, prompts, tokens

from revolta_engine import LLM

TP = dict(tensor_parallel_size=2, dtype="float32", block_size=BLOCK, max_model_len=256)


@pytest.fixture(scope="module")
def split_reference(tiny_llama):
    """Greedy generations of the split model without offload or prefix reuse."""
    ps = prompts(3, 70)
    with LLM(str(tiny_llama), enable_prefix_caching=False, **TP) as llm:
        return ps, tokens(llm.generate(ps, GREEDY))


def test_blocks_evicted_on_every_rank_come_back_from_cpu_memory(tiny_llama, split_reference):
    """8 device blocks: later prompts overwrite the first one's blocks on both ranks, so its output is right
    again only if every rank copies its own shard back."""
    ps, expected = split_reference
    with LLM(str(tiny_llama), kv_offloading_size=0.05, num_gpu_blocks_override=8, max_num_seqs=1, **TP) as llm:
        on_device, from_tiers = evict_first_then_reload(llm, ps, expected)
    assert from_tiers == (4 - on_device) * BLOCK
    assert not multiprocessing.active_children(), "the worker processes outlived the engine"


def test_files_of_each_rank_survive_a_restart_and_a_damaged_shard_is_recomputed(tiny_llama, split_reference,
                                                                                  tmp_path):
    ps, expected = split_reference
    with LLM(str(tiny_llama), kv_offload_path=str(tmp_path), **TP) as first:
        assert tokens(first.generate(ps, GREEDY)) == expected
    per_rank = 3 * ((70 + 12 - 1) // BLOCK)
    dirs = sorted(d for d in tmp_path.iterdir() if d.is_dir())  # one per rank (its own layout fingerprint)
    assert len(dirs) == 2 and all(len(list(d.rglob("*.kvblock"))) == per_rank for d in dirs)

    with LLM(str(tiny_llama), kv_offload_path=str(tmp_path), **TP) as second:
        out = second.generate(ps[:2], GREEDY)
    assert tokens(out) == expected[:2]
    assert [o.num_cached_tokens for o in out] == [4 * BLOCK] * 2

    # one rank's files damaged (each rank's in turn: the worker's is the case that needs the ranks to agree):
    # no rank may use its own copy, so the prompt is recomputed, and right
    for damaged in dirs:
        saved = {f: f.read_bytes() for f in damaged.rglob("*.kvblock")}
        for f, data in saved.items():
            f.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
        with LLM(str(tiny_llama), kv_offload_path=str(tmp_path), **TP) as third:
            out = third.generate(ps[2], GREEDY)
        assert tokens(out) == [expected[2]] and out[0].num_cached_tokens == 0
        for f, data in saved.items():  # damaged files were removed and rewritten intact; put the originals back
            f.write_bytes(data)
