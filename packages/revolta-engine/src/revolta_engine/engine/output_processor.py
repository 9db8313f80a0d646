"""Per-request output state: detokenized text, stop strings, logprobs and what to report each step."""

from __future__ import annotations

import time
from collections.abc import Callable

from transformers import PreTrainedTokenizerBase

from revolta_engine.core.request import Request, RequestStatus
from revolta_engine.engine.detokenizer import IncrementalDetokenizer
from revolta_engine.engine.stop_checker import find_stop
from revolta_engine.outputs import CompletionOutput, Logprob, PositionLogprobs, RequestMetrics, RequestOutput
from revolta_engine.sampling_params import RequestOutputKind, SamplingParams


class CompletionState:
    """The growing output of one sequence, and what of it was already reported."""

    def __init__(self, index: int, request: Request, tokenizer: PreTrainedTokenizerBase | None) -> None:
        self.index = index
        self.request = request
        params = request.sampling_params
        self.tokenizer = tokenizer
        self.detok = (
            IncrementalDetokenizer(tokenizer, request.prompt_token_ids, params.skip_special_tokens,
                                   params.spaces_between_special_tokens)
            if tokenizer is not None else None
        )
        self.text = ""
        self.logprobs: list[PositionLogprobs] | None = [] if params.logprobs is not None else None
        self.cumulative_logprob: float | None = 0.0 if params.logprobs is not None else None
        self.sent_tokens = 0
        self.sent_text = 0
        self.sent_logprobs = 0
        self.sent_finish = False
        stops = params.stop or []
        # While running, hold back text that could still turn out to be the start of a stop string.
        self.hold_back = max((len(s) for s in stops), default=1) - 1 if not params.include_stop_str_in_output else 0

    def decoded(self, token_id: int) -> str | None:
        """The token's text on its own (None without a tokenizer)."""
        if self.tokenizer is None:
            return None
        return self.tokenizer.decode([token_id], skip_special_tokens=False)  # type: ignore[return-value]

    def on_token(self, token_id: int, logprob: tuple[float, int, list[int], list[float]] | None) -> None:
        """Account for a newly sampled token (already appended to the request and stop-checked)."""
        request = self.request
        params = request.sampling_params
        if logprob is not None and self.logprobs is not None:
            lp, rank, top_ids, top_lps = logprob
            self.logprobs.append(position_entry(token_id, lp, rank, top_ids, top_lps, self.decoded))
            self.cumulative_logprob = (self.cumulative_logprob or 0.0) + lp
        if self.detok is None:
            return
        stopped_by_token = request.status == RequestStatus.FINISHED_STOPPED
        if stopped_by_token and not params.include_stop_str_in_output:
            return
        new = self.detok.add(token_id)
        if not new:
            return
        self.text += new
        if params.stop and not stopped_by_token:
            match = find_stop(self.text, len(new), params.stop)  # type: ignore[arg-type]
            if match is not None:
                idx, stop = match
                self.text = self.text[: idx + len(stop)] if params.include_stop_str_in_output else self.text[:idx]
                request.status = RequestStatus.FINISHED_STOPPED
                request.stop_reason = stop

    def output(self, kind: RequestOutputKind) -> CompletionOutput | None:
        """The completion to report now (None when DELTA has nothing new)."""
        request = self.request
        finished = request.status.finished
        text_end = len(self.text) if finished else max(len(self.text) - self.hold_back, self.sent_text)
        tokens = request.output_token_ids
        if kind == RequestOutputKind.DELTA:
            if self.sent_finish or (not finished and len(tokens) == self.sent_tokens and text_end == self.sent_text):
                return None  # nothing new, or its final delta already went out while siblings run
            out = CompletionOutput(
                self.index, self.text[self.sent_text:text_end], tokens[self.sent_tokens:],
                self.cumulative_logprob,
                self.logprobs[self.sent_logprobs:] if self.logprobs is not None else None,
                request.status.finish_reason, request.stop_reason,
            )
        else:
            out = CompletionOutput(
                self.index, self.text[:text_end], list(tokens), self.cumulative_logprob,
                list(self.logprobs) if self.logprobs is not None else None,
                request.status.finish_reason, request.stop_reason,
            )
        self.sent_tokens, self.sent_text = len(tokens), text_end
        self.sent_finish = finished
        self.sent_logprobs = len(self.logprobs) if self.logprobs is not None else 0
        return out


def position_entry(token_id: int, lp: float, rank: int, top_ids: list[int], top_lps: list[float],
                   decode: Callable[[int], str | None]) -> PositionLogprobs:
    """One position's logprobs: the token's own first, then the top alternatives (ranks from 1)."""
    entry: PositionLogprobs = {token_id: Logprob(lp, rank, decode(token_id))}
    for r, (tid, tlp) in enumerate(zip(top_ids, top_lps, strict=True), start=1):
        entry.setdefault(tid, Logprob(tlp, r, decode(tid)))
    return entry


class ParentRequestState:
    """A user request and its ``n`` sequences."""

    def __init__(self, request_id: str, prompt: str | None, prompt_token_ids: list[int],
                 params: SamplingParams, children: list[CompletionState], arrival_time: float) -> None:
        self.request_id = request_id
        self.prompt = prompt
        self.prompt_token_ids = prompt_token_ids
        self.params = params
        self.children = children
        self.metrics = RequestMetrics(arrival_time=arrival_time)
        self.reported_final = False
        # prompt_logprobs: entry i for prompt token i (0 stays None); reported once every entry is known
        self.prompt_logprobs: list[PositionLogprobs | None] | None = (
            [None] * len(prompt_token_ids) if params.prompt_logprobs is not None else None)
        self._prompt_logprobs_missing = max(len(prompt_token_ids) - 1, 0)
        self._prompt_logprobs_sent = False

    def set_prompt_logprob(self, position: int, token_id: int, lp: float, rank: int, top_ids: list[int],
                           top_lps: list[float]) -> None:
        """Record prompt token ``position``'s logprob (a recomputation after preemption rewrites it)."""
        assert self.prompt_logprobs is not None
        if self.prompt_logprobs[position] is None:
            self._prompt_logprobs_missing -= 1
        self.prompt_logprobs[position] = position_entry(token_id, lp, rank, top_ids, top_lps,
                                                        self.children[0].decoded)

    def _prompt_logprobs_to_report(self, kind: RequestOutputKind) -> list[PositionLogprobs | None] | None:
        if self.prompt_logprobs is None or self._prompt_logprobs_missing > 0:
            return None
        if kind == RequestOutputKind.DELTA:
            if self._prompt_logprobs_sent:
                return None
            self._prompt_logprobs_sent = True
        return list(self.prompt_logprobs)

    @property
    def finished(self) -> bool:
        return all(c.request.status.finished for c in self.children)

    def note_token(self) -> None:
        now = time.monotonic()
        if self.metrics.first_token_time is None:
            self.metrics.first_token_time = now
        self.metrics.last_token_time = now

    def make_output(self) -> RequestOutput | None:
        """The output to report this step, per the request's output kind."""
        kind = self.params.output_kind
        finished = self.finished
        if kind == RequestOutputKind.FINAL_ONLY and not finished:
            return None
        if finished:
            self.metrics.finished_time = self.metrics.finished_time or time.monotonic()
        outs = [c.output(kind) for c in self.children]
        completions = [o for o in outs if o is not None]
        if not completions and not finished:
            return None
        cached = max(c.request.num_cached_tokens for c in self.children)
        self.metrics.num_cached_tokens = max(cached, 0)
        return RequestOutput(
            self.request_id, self.prompt, self.prompt_token_ids, completions, finished,
            prompt_logprobs=self._prompt_logprobs_to_report(kind), num_cached_tokens=max(cached, 0),
            metrics=self.metrics,
        )
