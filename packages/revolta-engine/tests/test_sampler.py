"""The sampler against float64 math: filters, penalties, seeds and logprobs."""

from __future__ import annotations

import math

import pytest
import torch

from revolta_engine.errors import InvalidRequestError
from revolta_engine.sample.penalties import apply_penalties
from revolta_engine.sample.sampler import Sampler, SamplingRow
from revolta_engine.sampling_params import SamplingParams


def row(params: SamplingParams, seed: int | None = None, output: list[int] | None = None) -> SamplingRow:
    gen = torch.Generator().manual_seed(seed) if seed is not None else None
    return SamplingRow(params, [1, 2], output or [], gen, [])


def empirical(logits: torch.Tensor, params: SamplingParams, draws: int = 4000) -> torch.Tensor:
    sampler = Sampler()
    counts = torch.zeros(logits.shape[-1])
    rows = [row(params, seed=s) for s in range(draws)]
    out = sampler(logits.expand(draws, -1).clone(), rows)
    for t in out.token_ids:
        counts[t] += 1
    return counts / draws


def test_greedy_is_argmax_and_ignores_seed():
    logits = torch.tensor([[0.1, 3.0, 2.9, -1.0]])
    out = Sampler()(logits, [row(SamplingParams(temperature=0.0), seed=3)])
    assert out.token_ids == [1]


def test_top_k_top_p_min_p_keep_exactly_the_expected_tokens():
    logits = torch.log(torch.tensor([[0.5, 0.25, 0.15, 0.07, 0.03]]))
    assert set(empirical(logits, SamplingParams(top_k=2)).nonzero().flatten().tolist()) == {0, 1}
    # top_p=0.8: 0.5 + 0.25 = 0.75 < 0.8, so the third token is needed too.
    assert set(empirical(logits, SamplingParams(top_p=0.8)).nonzero().flatten().tolist()) == {0, 1, 2}
    # min_p=0.25: keep p >= 0.125.
    assert set(empirical(logits, SamplingParams(min_p=0.25)).nonzero().flatten().tolist()) == {0, 1, 2}


def test_sampling_frequencies_follow_temperature_scaled_softmax():
    logits = torch.tensor([[1.0, 0.5, 0.0, -0.5]])
    freq = empirical(logits, SamplingParams(temperature=0.7), draws=8000)
    expected = torch.softmax(logits.double()[0] / 0.7, dim=-1).float()
    assert torch.allclose(freq, expected, atol=0.025), (freq, expected)


def test_seeded_rows_do_not_depend_on_their_neighbours():
    logits = torch.randn(1, 50)
    alone = Sampler()(logits.clone(), [row(SamplingParams(temperature=1.0), seed=7)]).token_ids[0]
    crowd_logits = torch.cat([torch.randn(3, 50), logits])
    crowd_rows = [row(SamplingParams(temperature=1.0), seed=i) for i in range(3)]
    crowd_rows.append(row(SamplingParams(temperature=1.0), seed=7))
    assert Sampler()(crowd_logits, crowd_rows).token_ids[3] == alone


def test_penalties_match_their_definitions():
    logits = torch.tensor([[2.0, -2.0, 1.0, 0.5]], dtype=torch.float64)
    apply_penalties(logits, [[0]], [[1, 2, 2]], [2.0], [0.5], [0.25])
    # token 0: prompt only -> repetition: 2/2 = 1. token 1: output once -> -2*2 - 0.5 - 0.25
    # token 2: output twice -> 1/2 - 0.5 - 0.5. token 3: untouched.
    assert logits[0].tolist() == pytest.approx([1.0, -4.75, -0.5, 0.5])


def test_logprobs_are_raw_log_softmax_with_rank_and_top_k():
    logits = torch.tensor([[0.0, 2.0, 1.0]])
    out = Sampler()(logits, [row(SamplingParams(temperature=0.0, logprobs=2))])
    lp, rank, top_ids, top_lps = out.logprobs[0]
    ref = torch.log_softmax(logits.double(), -1)[0]
    assert rank == 1 and top_ids == [1, 2]
    assert math.isclose(lp, ref[1].item(), rel_tol=1e-6)
    assert top_lps == pytest.approx(ref[[1, 2]].tolist())


@pytest.mark.parametrize(
    "kwargs, param",
    [({"top_p": 0.0}, "top_p"), ({"top_p": 1.5}, "top_p"), ({"max_tokens": 0}, "max_tokens"),
     ({"max_tokens": -3}, "max_tokens"), ({"temperature": -1}, "temperature"), ({"n": 0}, "n"),
     ({"top_k": -2}, "top_k"), ({"min_p": 2}, "min_p"), ({"repetition_penalty": 0}, "repetition_penalty"),
     ({"stop": [""]}, "stop"), ({"min_tokens": 5, "max_tokens": 2}, "min_tokens")],
)
def test_invalid_params_raise_a_typed_error_naming_the_field(kwargs, param):
    with pytest.raises(InvalidRequestError) as err:
        SamplingParams(**kwargs)
    assert err.value.param == param and param in str(err.value)
