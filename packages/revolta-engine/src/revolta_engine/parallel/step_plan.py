"""What rank 0 sends the other tensor-parallel ranks each step: just enough of the scheduled batch for
:meth:`~revolta_engine.worker.model_runner.ModelRunner.prepare` to lay out the same inputs.

A worker never sees a whole request: :class:`TokenWindow` holds the tokens the step reads and answers indexing as
the request's token list would, so the runner's hot path is the same code on every rank.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from revolta_engine.core.scheduler import ScheduledRequest


class TokenWindow:
    """The tokens ``[offset, offset + len(tokens))`` of a request, indexed by position in the request."""

    __slots__ = ("offset", "tokens")

    def __init__(self, offset: int, tokens: list[int]) -> None:
        self.offset = offset
        self.tokens = tokens

    def __len__(self) -> int:
        return self.offset + len(self.tokens)

    def __getitem__(self, index: int | slice) -> int | list[int]:
        if isinstance(index, slice):
            start = self.offset if index.start is None else index.start
            stop = len(self) if index.stop is None else index.stop
            if start < self.offset:
                raise IndexError(f"token {start} is before this window (from {self.offset})")
            return self.tokens[start - self.offset:stop - self.offset]
        if index < self.offset:
            raise IndexError(f"token {index} is before this window (from {self.offset})")
        return self.tokens[index - self.offset]


@dataclass
class RemoteRequest:
    """The fields of a request that the runner reads."""

    request_id: str
    num_computed_tokens: int
    all_token_ids: TokenWindow
    spec_token_ids: list[int]


@dataclass
class RemoteScheduled:
    """A :class:`ScheduledRequest` as a worker sees it."""

    request: RemoteRequest
    num_new_tokens: int
    completes: bool
    num_drafts: int


@dataclass
class StepPlan:
    """One forward pass for the workers: the batch, its block tables, the prompt rows whose hidden states rank 0
    keeps (prompt logprobs: the workers take part in those logits too), and hybrid models' state slots."""

    scheduled: list[RemoteScheduled]
    block_tables: list[list[int]]
    keep_rows: list[int] | None = None
    # hybrid models: slots to reset first ((slot, snapshot slot or None)), each sequence's slot, the snapshots
    state_resets: list[tuple[int, int | None]] = field(default_factory=list)
    state_slots: list[int] | None = None
    snapshots: list[tuple[int, int, int]] | None = None
    num_sampled: int = field(init=False)  # rows rank 0 samples, whose token ids it then broadcasts

    def __post_init__(self) -> None:
        self.num_sampled = sum(s.num_drafts + 1 for s in self.scheduled if s.completes)


def remote_scheduled(s: ScheduledRequest) -> RemoteScheduled:
    """What a worker needs of ``s``: the tokens it feeds (the known ones among the new), not the whole request."""
    req = s.request
    start = req.num_computed_tokens
    known = len(req.all_token_ids)
    end = min(start + s.num_new_tokens, known)
    window = TokenWindow(start, list(req.all_token_ids[start:end]) if start < end else [])
    remote = RemoteRequest(req.request_id, start, window, list(req.spec_token_ids[:s.num_drafts]))
    return RemoteScheduled(remote, s.num_new_tokens, s.completes, s.num_drafts)
