"""Verifying drafts against the target, the same way for every proposer.

A step that verifies drafts feeds the newest token and the drafts together and samples at every one of those
positions. Drafts are kept while each equals the token sampled at its position; the first sample that differs
(or the one after the last draft) is the step's extra token. Because a draft is chosen without looking at the
target's samples, keeping it exactly when an independent sample of the target distribution equals it, and
otherwise keeping that sample, draws each token from the target distribution: greedy output is unchanged, and
random sampling keeps its distribution. (A draft is accepted with the target's probability of that token, so the
most likely token is the best draft: the model proposers propose greedily.)

Hybrid (Gated DeltaNet) models snapshot their recurrent state after each verified position and go back to the
one after the last kept draft (:func:`draft_state_snapshots`).

Requests that ask for logprobs get drafts: every verified position has its own row of logits, so each kept
token's logprobs are those of its row, as a step without drafts reports them. Requests with a grammar,
penalties (repetition, presence, frequency), bad words or a pending ``min_tokens`` are not given drafts
(:func:`wants_drafts`): their sampling at a position depends on the tokens before it (the grammar's mask, the
penalised counts, a bad word's prefix, whether eos is still blocked), which a batched verification would have to
advance through each draft; those requests decode one token per step.
"""

from __future__ import annotations

from typing import Any


def wants_drafts(request: Any) -> bool:
    """Whether a request's sampling allows verifying several positions in one step."""
    p = request.sampling_params
    return (request.grammar is None and p.repetition_penalty == 1.0
            and not p.presence_penalty and not p.frequency_penalty and not request.bad_words_ids
            and request.num_output_tokens >= p.min_tokens)


def accepted_tokens(drafts: list[int], sampled: list[int]) -> list[int]:
    """The tokens a verification step yields: sampled tokens up to and including the first that differs from
    its draft (all ``len(drafts) + 1`` when every draft matched)."""
    for i, draft in enumerate(drafts):
        if sampled[i] != draft:
            return sampled[:i + 1]
    return sampled[:len(drafts) + 1]


def draft_state_snapshots(scheduled: list[Any], first_scratch: int,
                          per_request: int) -> tuple[list[tuple[int, int, int]], dict[str, int]]:
    """Hybrid models: ``(sequence, new tokens, slot)`` snapshots of the recurrent state after each verified position
    but the last, for every request that verifies drafts, into scratch slots (``per_request`` of them per batch row,
    from ``first_scratch``: the layout verification graphs snapshot into too); and every request's first scratch
    slot. After verification the state after the last kept draft is copied back from there (the last position's
    is the state the pass leaves anyway)."""
    snapshots: list[tuple[int, int, int]] = []
    firsts: dict[str, int] = {}
    for i, s in enumerate(scheduled):
        first = firsts[s.request.request_id] = first_scratch + i * per_request
        snapshots += [(i, j, first + j - 1) for j in range(1, s.num_drafts + 1)]
    return snapshots, firsts
