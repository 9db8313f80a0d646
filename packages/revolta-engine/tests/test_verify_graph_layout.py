"""Speculative verification in the decode graphs' padded layout changes no output (no GPU needed).

A verification graph feeds every sequence ``1 + k`` query tokens: its own tokens, then padding that writes no
K/V, and hybrid models snapshot every position into fixed scratch slots. On the CPU the graphs cannot be
captured, so this runs the very forward pass a graph captures (:meth:`CudaGraphRunner._forward`, the same input
layout, the same static snapshot slots) eagerly in place of its replay, through the engine's real loop.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hybrid_checkpoints import make_family_checkpoint
from spec_helpers import oracle_drafts, repetitive_prompts

from revolta_engine import LLM, SamplingParams
from revolta_engine.worker.cuda_graph import CudaGraphRunner, default_buckets, verify_buckets

K = 3
NGRAM = {"method": "ngram", "num_speculative_tokens": K}


class EagerReplay(CudaGraphRunner):
    """A graph runner whose "replay" runs the captured forward pass eagerly (the CPU cannot capture)."""

    def capture(self) -> None:
        for q, bks in self.buckets_of.items():
            for bs in bks:
                for width in self.widths:
                    self.graphs[bs, width, q] = None  # type: ignore[assignment]
        self.replayed: list[tuple[int, int, int]] = []

    def run(self, bs, width, q=1, state_indices=None):
        if state_indices is not None:
            n = state_indices.shape[0]
            self.state_indices[:n].copy_(state_indices)
            self.state_indices[n:bs].fill_(self.pad_slot)
        self.replayed.append((bs, width, q))
        return self._forward(bs, width, q)


def _with_eager_graphs(llm: LLM, max_seqs: int) -> EagerReplay:
    engine = llm.llm_engine
    runner, caches = engine.runner, engine.parts.caches
    buckets = default_buckets(max_seqs)
    graphs = EagerReplay(engine.model, caches.kv_caches, runner.buffers, max_seqs, engine.max_model_len,
                         engine.device, buckets=buckets, state_caches=caches.state_caches, pad_slot=caches.pad_slot,
                         verify=(1 + K, verify_buckets(buckets, 1 + K, 512)), scratch_slot=caches.scratch_slot)
    graphs.capture()
    runner.graph_runner = graphs
    return graphs


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory):
    return make_family_checkpoint(tmp_path_factory.mktemp("verify-graph"), "qwen3_5")


@pytest.mark.parametrize("family", ["llama", "hybrid"])
def test_padded_verification_layout_keeps_greedy_output(family, tiny_llama, hybrid, monkeypatch):
    path = tiny_llama if family == "llama" else hybrid
    base = {"dtype": "float32", "max_model_len": 256, "block_size": 16, "max_num_seqs": 6,
            "enable_prefix_caching": False}
    # drafts that know the greedy continuation and spoil it from a moving position (0..k kept); the short
    # prompts get none, so they ride along padded in the verification graphs
    prompts = repetitive_prompts(4) + [{"prompt_token_ids": [7 + i, 40 + 3 * i, 90 - i, 11]} for i in range(2)]
    params = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    plain = LLM(str(path), **base).generate(prompts, params)
    want = [o.outputs[0].token_ids for o in plain]
    spec = LLM(str(path), speculative_config=NGRAM, **base)
    oracle = oracle_drafts({tuple(p["prompt_token_ids"]): w for p, w in zip(prompts, want, strict=True)},
                           spec.llm_engine.hf_config.vocab_size)
    monkeypatch.setattr("revolta_engine.engine.llm_engine.next_drafts",
                        lambda spec_cfg, req, *a: [] if req.num_prompt_tokens == 4 else oracle(spec_cfg, req, *a))
    graphs = _with_eager_graphs(spec, 6)
    got = [o.outputs[0].token_ids for o in spec.generate(prompts, params)]
    assert got == want
    verify = [b for b in graphs.replayed if b[2] == 1 + K]
    assert verify, "no verification step ran in the graph layout"
    assert any(b[2] == 1 for b in graphs.replayed), "no plain decode step ran in the graph layout"
    stats = spec.llm_engine.get_stats()
    assert 0 < stats.spec_decode_num_accepted_tokens < stats.spec_decode_num_draft_tokens


def test_verification_buckets_stay_within_the_token_cap():
    assert verify_buckets([1, 2, 4, 8, 16, 24, 32], 4, 64) == [1, 2, 4, 8, 16]
    assert verify_buckets([1, 2], 8, 4) == [1]  # one sequence always fits


def test_mtp_head_in_the_graph_layout_drafts_like_the_reference(tmp_path):
    import torch
    from mtp_head import add_mtp_head, assert_drafts_match_reference
    from spec_helpers import prompts, record_drafts
    from transformers import AutoModelForCausalLM

    from revolta_engine.spec_decode.mtp_head import StaticHiddenHead

    path = make_family_checkpoint(tmp_path, "qwen3_5")
    head = add_mtp_head(path, "qwen3_5")
    ref = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    llm = LLM(str(path), dtype="float32", max_model_len=256, max_num_seqs=6,
              speculative_config={"method": "mtp", "num_speculative_tokens": K})
    _with_eager_graphs(llm, 6)  # the target's verification in the padded layout too
    proposer = llm.llm_engine.draft
    runner = proposer.runner
    # what capture_head_graphs sets up on a GPU, with the eager stand-in for the replay
    static = StaticHiddenHead(proposer.head, runner.buffers.max_tokens, proposer.head.hidden_size, torch.float32,
                              runner.device)
    runner.model, runner.keep_step_hidden = static, True
    buckets = default_buckets(6)
    graphs = EagerReplay(static, runner.kv_caches, runner.buffers, 6, 256, runner.device, buckets=buckets,
                         verify=(1 + K, verify_buckets(buckets, 1 + K, 512)))
    graphs.capture()
    runner.graph_runner, proposer._static = graphs, static
    seen = record_drafts(llm)
    llm.generate(prompts(4), SamplingParams(temperature=0.0, max_tokens=14, ignore_eos=True))
    assert len(seen) >= 10
    assert_drafts_match_reference(seen, ref, head)
    assert any(q == 1 for _, _, q in graphs.replayed)  # the chained drafts ran in the decode layout


def test_static_hidden_head_places_rows_where_the_pass_reads_them():
    import torch

    from revolta_engine.spec_decode.mtp_head import StaticHiddenHead

    static = StaticHiddenHead(torch.nn.Identity(), 8, 2, torch.float32, torch.device("cpu"))  # type: ignore[arg-type]
    rows = torch.arange(6, dtype=torch.float32).view(3, 2)
    static.place(rows, SimpleNamespace(hidden_index=None))  # eager pass or decode graph: rows 0..
    assert torch.equal(static.hidden[:3], rows)
    static.hidden.zero_()
    static.place(rows, SimpleNamespace(hidden_index=torch.tensor([0, 4, 5])))  # a padded verification graph
    assert torch.equal(static.hidden[[0, 4, 5]], rows) and not static.hidden[[1, 2, 3, 6, 7]].any()
