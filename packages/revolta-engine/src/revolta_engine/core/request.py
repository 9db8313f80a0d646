"""One sequence being generated: its tokens, progress and state."""

from __future__ import annotations

import enum
import time
from typing import TYPE_CHECKING

from revolta_engine.sampling_params import SamplingParams

if TYPE_CHECKING:
    from revolta_engine.sample.structured import GrammarState


class RequestStatus(enum.Enum):
    """Where a request is in its life."""

    WAITING = enum.auto()
    RUNNING = enum.auto()
    PREEMPTED = enum.auto()
    FINISHED_STOPPED = enum.auto()
    FINISHED_LENGTH = enum.auto()
    FINISHED_ABORTED = enum.auto()

    @property
    def finished(self) -> bool:
        return self in (RequestStatus.FINISHED_STOPPED, RequestStatus.FINISHED_LENGTH,
                        RequestStatus.FINISHED_ABORTED)

    @property
    def finish_reason(self) -> str | None:
        return {
            RequestStatus.FINISHED_STOPPED: "stop",
            RequestStatus.FINISHED_LENGTH: "length",
            RequestStatus.FINISHED_ABORTED: "abort",
        }.get(self)


class Request:
    """A single sequence (one of a parent request's ``n`` completions).

    The scheduler moves ``num_computed_tokens`` toward ``num_tokens``; whenever the two meet after a
    forward pass a new token is sampled and appended. Prefill, chunked prefill, prefix-cache hits and
    recompute after preemption are all the same motion. With asynchronous scheduling a sampled token can
    still be on its way from the GPU (``num_pending_tokens``) while the next step already computes it.
    """

    def __init__(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        sampling_params: SamplingParams,
        max_tokens: int,
        eos_token_ids: set[int],
        arrival_time: float | None = None,
        priority: int = 0,
    ) -> None:
        self.request_id = request_id
        self.prompt_token_ids = list(prompt_token_ids)
        self.sampling_params = sampling_params
        self.max_tokens = max_tokens
        self.eos_token_ids = eos_token_ids
        self.arrival_time = arrival_time if arrival_time is not None else time.monotonic()
        self.priority = priority  # the priority policy runs lower values first
        self.all_token_ids: list[int] = list(prompt_token_ids)
        self.output_token_ids: list[int] = []
        self.num_computed_tokens = 0
        self.num_pending_tokens = 0  # sampled on the device but not appended yet (async scheduling)
        self.num_cached_tokens = -1  # prefix-cache hit length at first scheduling; -1 until then
        self.status = RequestStatus.WAITING
        self.stop_reason: int | str | None = None
        self.block_hashes: list[bytes] = []
        self.num_preemptions = 0
        # structured output: the grammar matcher, which has accepted exactly output_token_ids
        self.grammar: GrammarState | None = None
        # speculative decoding: draft tokens the next step feeds after the newest token and verifies
        self.spec_token_ids: list[int] = []
        # bad_words as token sequences (see revolta_engine.sample.bad_words)
        self.bad_words_ids: list[list[int]] = []

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.all_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_token_ids)

    def append_token(self, token_id: int) -> None:
        """Record a newly sampled token (one that was pending, if any is)."""
        if self.num_pending_tokens:
            self.num_pending_tokens -= 1
        self.all_token_ids.append(token_id)
        self.output_token_ids.append(token_id)

    def check_token_stop(self, max_model_len: int) -> bool:
        """Finish on EOS / stop token ids / max_tokens / max_model_len after the last appended token."""
        params = self.sampling_params
        last = self.output_token_ids[-1]
        if self.num_output_tokens >= params.min_tokens:
            if not params.ignore_eos and last in self.eos_token_ids:
                self.status = RequestStatus.FINISHED_STOPPED
                return True
            if last in params.stop_token_ids:  # type: ignore[operator]
                self.status = RequestStatus.FINISHED_STOPPED
                self.stop_reason = last
                return True
        if self.num_output_tokens >= self.max_tokens or self.num_tokens >= max_model_len:
            self.status = RequestStatus.FINISHED_LENGTH
            return True
        return False
