"""Speculative verification in the decode graphs' padded layout changes no output (no GPU needed).

A verification graph feeds every sequence ``1 + k`` query tokens: its own tokens, then padding that writes no
K/V, and hybrid models snapshot every position into fixed scratch slots. On the CPU the graphs cannot be
captured, so this runs the very forward pass a graph captures (:meth:`CudaGraphRunner._forward`, the same input
layout, the same static snapshot slots) eagerly in place of its replay, through the engine's real loop.
"""

from __future__ import annotations

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
