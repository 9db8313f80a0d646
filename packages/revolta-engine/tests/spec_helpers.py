"""Helpers shared by the speculative-decoding tests (n-gram, draft model, MTP, hybrid rollback, tensor parallel,
GPU): prompts that repeat themselves, a proposer that knows the greedy continuation, a two-sample chi-square of
sampled tokens, and a recorder of an MTP head's proposals."""

from __future__ import annotations

import random

from revolta_engine import LLM
from revolta_engine.spec_decode.mtp import MtpProposer


def repetitive_prompts(n: int, *, motif: tuple[int, int] = (6, 3), repeats: int = 8,
                       length: tuple[int, int] = (18, 5)) -> list[dict]:
    """``n`` prompts that repeat a random motif: prompt i's motif has ``motif[0] + i % motif[1]`` tokens, repeated
    ``repeats`` times and cut to ``length[0] + length[1] * i`` tokens."""
    rng = random.Random(0)
    out = []
    for i in range(n):
        tokens = [rng.randrange(5, 400) for _ in range(motif[0] + i % motif[1])]
        out.append({"prompt_token_ids": (tokens * repeats)[:length[0] + length[1] * i]})
    return out


def oracle_drafts(expected: dict[tuple[int, ...], list[int]], vocab: int):
    """A proposer that knows each prompt's plain greedy continuation and spoils it from a position that moves with
    the output length, so verification keeps 0, 1, ... or all of the drafts over a run."""
    def propose(spec, req, max_model_len, placeholders):
        done = req.num_output_tokens
        room = min(spec.num_speculative_tokens, req.max_tokens - done - 1)
        right = expected[tuple(req.prompt_token_ids)][done:done + room]
        wrong_from = random.Random(done * 1000 + len(req.prompt_token_ids)).randrange(room + 1)
        return [t if i < wrong_from else (t + 1) % vocab for i, t in enumerate(right)]
    return propose


def assert_same_marginals(a_out: list[list[int]], b_out: list[list[int]], positions: tuple[int, ...]) -> None:
    """Two samples of sequences draw the token at each of ``positions`` from the same distribution: a two-sample
    chi-square over the tokens seen at least 10 times (the rest pooled), within about 4 standard deviations."""
    from collections import Counter

    chi2, dof = 0.0, 0
    for pos in positions:
        a = Counter(t[pos] for t in a_out if len(t) > pos)
        b = Counter(t[pos] for t in b_out if len(t) > pos)
        common = [k for k in set(a) | set(b) if a[k] + b[k] >= 10]
        cells = [(a[k], b[k]) for k in common]
        cells.append((sum(a.values()) - sum(x for x, _ in cells), sum(b.values()) - sum(y for _, y in cells)))
        chi2 += sum((x - y) ** 2 / (x + y) for x, y in cells if x + y)
        dof += len(cells) - 1
    assert chi2 < dof + 4 * (2 * dof) ** 0.5, (chi2, dof)  # about 4 standard deviations of the null


def prompts(n: int) -> list[dict]:
    rng = random.Random(3)
    return [{"prompt_token_ids": [rng.randrange(5, 200) for _ in range(9 + 5 * i)]} for i in range(n)]


def record_drafts(llm: LLM) -> list[tuple[list[int], list[int]]]:
    """(known tokens, drafts) of every request each time the head proposes."""
    proposer = llm.llm_engine.draft
    assert isinstance(proposer, MtpProposer)
    seen: list[tuple[list[int], list[int]]] = []
    original = proposer.propose

    def propose(scheduled, tables):
        original(scheduled, tables)
        seen.extend((list(s.request.all_token_ids), list(s.request.spec_token_ids[:s.num_drafts]))
                    for s in scheduled if s.num_drafts)

    proposer.propose = propose  # type: ignore[method-assign]
    return seen
