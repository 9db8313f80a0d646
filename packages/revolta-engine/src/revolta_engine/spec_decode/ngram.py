"""N-gram drafts (vLLM's ``speculative_config={"method": "ngram", ...}``): tokens looked up in the request itself.

After a request's newest token arrives, the longest suffix of its tokens (``prompt_lookup_max`` down to
``prompt_lookup_min`` tokens) is looked up earlier in the same sequence; the up to ``num_speculative_tokens``
tokens that followed the most recent earlier occurrence become draft tokens. No model runs, so the drafts are
known as soon as the step that produced the newest token is done.

With asynchronous scheduling the next step is launched before the newest token reaches the host, so it cannot
carry drafts. :meth:`NgramProposer.may_draft` tells, from the tokens already known, whether any lookup could
succeed whatever that token turns out to be (the suffix's other ``prompt_lookup_min - 1`` tokens must have
occurred earlier); when none can, the engine keeps the loop asynchronous and loses nothing.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from revolta_engine.core.request import Request
from revolta_engine.core.scheduler import ScheduledRequest
from revolta_engine.spec_decode.base import Proposer


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


class NgramProposer(Proposer):
    """Drafts looked up in the request's own tokens: no model, no cache; an index of each request's tokens for
    :meth:`may_draft`."""

    reads_target_hidden = False

    def __init__(self, lookup_max: int, lookup_min: int) -> None:
        self.lookup_max = lookup_max
        self.lookup_min = lookup_min
        # request id -> (window starts indexed, first start of each (lookup_min - 1)-gram); see may_draft
        self._first: dict[str, tuple[int, dict[Any, int]]] = {}

    def may_draft(self, request: Request) -> bool:
        """Whether a lookup after the request's next token (not known yet) could find drafts: an earlier
        occurrence of the last ``lookup_min - 1`` known tokens with room for the token after them."""
        tokens = request.all_token_ids
        m = self.lookup_min - 1
        if m == 0:
            return len(tokens) >= 1
        indexed, first = self._first.get(request.request_id, (0, {}))
        for i in range(indexed, len(tokens) - m + 1):  # windows added since the last call
            first.setdefault(tokens[i] if m == 1 else tuple(tokens[i:i + m]), i)
        self._first[request.request_id] = (max(indexed, len(tokens) - m + 1), first)
        key = tokens[-1] if m == 1 else tuple(tokens[-m:])
        return len(tokens) >= m and first.get(key, len(tokens)) <= len(tokens) - self.lookup_min

    @property
    def bytes_per_block(self) -> int:
        """No cache of its own."""
        return 0

    def allocate(self, num_blocks: int, max_num_batched_tokens: int, max_num_seqs: int, target_runner: Any) -> None:
        """Nothing to allocate."""

    def next_drafts(self, request: Request, room: int) -> list[int]:
        """The drafts, looked up now in the request's prompt and output so far."""
        return propose_ngram(request.all_token_ids, room, self.lookup_max, self.lookup_min)

    def propose(self, scheduled: list[ScheduledRequest], block_tables: list[list[int]]) -> None:
        """Nothing to fill: :meth:`next_drafts` gave the drafts already."""

    def observe(self) -> None:
        """Nothing to do after a target step."""

    def verified(self, request: Request) -> None:
        """Nothing to do after a verification step."""

    def forget(self, request_id: str) -> None:
        """Drop the request's index of its tokens."""
        self._first.pop(request_id, None)
