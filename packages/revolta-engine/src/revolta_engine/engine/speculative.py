"""Speculative decoding: n-gram drafts (vLLM's ``speculative_config={"method": "ngram", ...}``), a draft
model's (``{"model": PATH, ...}``, see :mod:`revolta_engine.engine.draft_model`) or the checkpoint's MTP head's
(``{"method": "mtp", ...}``, see :mod:`revolta_engine.engine.mtp_proposer`), verified the same way.

After a request's newest token arrives, the longest suffix of its tokens (``prompt_lookup_max`` down to
``prompt_lookup_min`` tokens) is looked up earlier in the same sequence; the up to ``num_speculative_tokens``
tokens that followed the most recent earlier occurrence become draft tokens. The next step feeds the newest
token and the drafts together and samples at every one of those positions. Drafts are kept while each equals
the token sampled at its position; the first sample that differs (or the one after the last draft) is the
step's extra token. Because a draft is chosen without looking at the target's samples, keeping it exactly when
an independent sample of the target distribution equals it, and otherwise keeping that sample, draws each token
from the target distribution: greedy output is unchanged, and random sampling keeps its distribution. (A draft
is accepted with the target's probability of that token, so the most likely token is the best draft: the draft
model proposes greedily.)

Hybrid (Gated DeltaNet) models snapshot their recurrent state after each verified position and go back to the
one after the last kept draft (:func:`draft_state_snapshots`). Requests with a grammar, penalties, bad words,
logprobs or a pending ``min_tokens`` are not given drafts (their sampling
depends on the tokens before each position in ways a batched verification does not reproduce here).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from revolta_engine.config.speculative import (  # noqa: F401 (re-exported)
    MAX_SPECULATIVE_TOKENS,
    SpeculativeConfig,
    parse_speculative_config,
)


def propose_ngram(tokens: list[int], k: int, lookup_max: int, lookup_min: int) -> list[int]:
    """Up to ``k`` draft tokens: what followed the latest earlier occurrence of the longest matching suffix."""
    n_tokens = len(tokens)
    if k <= 0 or n_tokens < lookup_min + 1:
        return []
    arr = np.asarray(tokens, dtype=np.int64)
    for n in range(min(lookup_max, n_tokens - 1), lookup_min - 1, -1):
        suffix = arr[n_tokens - n:]
        # windows that start at i and end before the suffix itself, so a continuation exists
        windows = np.lib.stride_tricks.sliding_window_view(arr[:n_tokens - 1], n)
        hits = np.flatnonzero((windows == suffix).all(axis=1))
        if hits.size:
            start = int(hits[-1]) + n
            return arr[start:start + k].tolist()
    return []


def wants_drafts(request: Any) -> bool:
    """Whether a request's sampling allows verifying several positions in one step."""
    p = request.sampling_params
    return (request.grammar is None and p.logprobs is None and p.repetition_penalty == 1.0
            and not p.presence_penalty and not p.frequency_penalty and not request.bad_words_ids
            and request.num_output_tokens >= p.min_tokens)


def accepted_tokens(drafts: list[int], sampled: list[int]) -> list[int]:
    """The tokens a verification step yields: sampled tokens up to and including the first that differs from
    its draft (all ``len(drafts) + 1`` when every draft matched)."""
    for i, draft in enumerate(drafts):
        if sampled[i] != draft:
            return sampled[:i + 1]
    return sampled[:len(drafts) + 1]


def next_drafts(spec: SpeculativeConfig, request: Any, max_model_len: int, placeholders: bool) -> list[int]:
    """Draft tokens for the request's next step, within its max_tokens and the context length. ``placeholders``:
    a draft model fills them once the step is scheduled (the scheduler makes room for as many)."""
    room = min(spec.num_speculative_tokens, request.max_tokens - request.num_output_tokens - 1,
               max_model_len - request.num_tokens - 1)
    if placeholders:
        return [0] * max(room, 0)
    return propose_ngram(request.all_token_ids, room, spec.prompt_lookup_max, spec.prompt_lookup_min)


def draft_state_snapshots(scheduled: list[Any], first_scratch: int,
                          per_request: int) -> tuple[list[tuple[int, int, int]], dict[str, int]]:
    """Hybrid models: ``(sequence, new tokens, slot)`` snapshots of the recurrent state after each verified position
    but the last, for every request that verifies drafts, into scratch slots (``per_request`` of them per batch row,
    from ``first_scratch``); and each such request's first scratch slot. After verification the state after the
    last kept draft is copied back from there (the last position's is the state the pass leaves anyway)."""
    snapshots: list[tuple[int, int, int]] = []
    firsts: dict[str, int] = {}
    for i, s in enumerate(scheduled):
        if s.num_drafts:
            first = first_scratch + i * per_request
            firsts[s.request.request_id] = first
            snapshots += [(i, j, first + j - 1) for j in range(1, s.num_drafts + 1)]
    return snapshots, firsts
