"""A draft proposer of known acceptance, for benchmarks only: it replays the target's own greedy continuation.

A first pass runs the target greedily without speculation and records each prompt's continuation
(:func:`record_continuations`). In the second pass the oracle drafts, at each draft position independently, the
recorded token with probability ``p`` and a wrong one (the recorded token + 1) otherwise; verification keeps the
drafts up to the first wrong one. With ``k`` drafts a step therefore accepts ``p + p^2 + ... + p^k`` drafts on
average (:func:`expected_acceptance_length`), on dummy weights as on real ones, so tokens/s can be measured at a
chosen acceptance.

It plugs into an engine built with a speculative config (``{"method": "ngram", "num_speculative_tokens": k}``:
the config sizes the verification steps and the draft slots) by taking the place of the engine's proposer
(:func:`install_oracle`). With a proposer in place the engine asks for placeholder drafts after each step and the
oracle fills them once the step is scheduled, before the target runs, as a proposer running a model does.
Nothing here is reachable from the engine's own configuration, the server or the command line.
"""

from __future__ import annotations

import random
from typing import Any

from revolta_engine import LLM, SamplingParams
from revolta_engine.core.request import Request
from revolta_engine.core.scheduler import ScheduledRequest
from revolta_engine.spec_decode.base import Proposer, placeholder_drafts


def expected_acceptance_length(p: float, k: int) -> float:
    """Tokens a verification step yields on average when each of its ``k`` drafts is right with probability ``p``
    independently and the drafts are kept up to the first wrong one: ``1 + p + p^2 + ... + p^k``."""
    return 1.0 + sum(p ** j for j in range(1, k + 1))


def record_continuations(llm: LLM, prompts: list[list[int]], max_tokens: int) -> dict[tuple[int, ...], list[int]]:
    """Each prompt's greedy continuation of ``max_tokens`` tokens (eos ignored), keyed by the prompt's token ids;
    ``llm`` should run without speculation (the oracle replays what plain decoding produces)."""
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    return {tuple(p): list(o.outputs[0].token_ids) for p, o in zip(prompts, outs, strict=True)}


class OracleProposer(Proposer):
    """Drafts the recorded continuation, each position right with probability ``p`` (seeded, independently).

    Counters (since the last :meth:`reset`): ``proposals`` (verification steps it drafted for), ``drafted``,
    ``planned_accepted`` (the drafts before the first wrong one, summed: what verification keeps while the target
    stays on its recorded continuation), ``expected_accepted`` (their expectation, ``p + ... + p^n`` per step of
    ``n`` drafts) and ``off_record`` (requests whose output left the recording: the target's numerics under
    verification differ from the recording pass, so its drafts after that are no longer the target's tokens).
    """

    reads_target_hidden = False

    def __init__(self, continuations: dict[tuple[int, ...], list[int]], p: float, vocab_size: int,
                 seed: int = 0) -> None:
        self.continuations = continuations
        self.vocab_size = vocab_size
        self.reset(p, seed)

    def reset(self, p: float, seed: int = 0) -> None:
        """Start over with acceptance ``p`` and a fresh generator; the counters go back to zero."""
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"p must be in [0, 1], got {p}")
        self.p = p
        self.rng = random.Random(seed)
        self.proposals = self.drafted = self.planned_accepted = 0
        self.expected_accepted = 0.0
        self._off_record: set[str] = set()

    @property
    def off_record(self) -> int:
        """Requests whose output left the recorded continuation."""
        return len(self._off_record)

    @property
    def bytes_per_block(self) -> int:
        """No cache of its own."""
        return 0

    def allocate(self, num_blocks: int, max_num_batched_tokens: int, max_num_seqs: int, target_runner: Any) -> None:
        """Nothing to allocate."""

    def next_drafts(self, request: Request, room: int) -> list[int]:
        """Placeholders: :meth:`propose` fills them once the step is scheduled."""
        return placeholder_drafts(room)

    def propose(self, scheduled: list[ScheduledRequest], block_tables: list[list[int]]) -> None:
        """Fill the drafts of every scheduled request that verifies some: the recorded tokens that follow its
        known and in-flight tokens, each kept right with probability ``p``."""
        for s in scheduled:
            if s.num_drafts:
                s.request.spec_token_ids[:s.num_drafts] = self._drafts(s.request, s.num_drafts)

    def _drafts(self, req: Request, n: int) -> list[int]:
        record = self.continuations.get(tuple(req.prompt_token_ids))
        if record is None:
            raise KeyError(f"request {req.request_id}: its prompt was not recorded (record_continuations first)")
        done = req.num_output_tokens
        if req.output_token_ids != record[:done]:
            self._off_record.add(req.request_id)
        start = done + req.num_pending_tokens  # the drafts follow the known tokens and those in flight
        drafts, planned, run = [], 0, True
        for j in range(n):
            true = record[start + j] if start + j < len(record) else None
            right = true is not None and self.rng.random() < self.p
            drafts.append(true if right and true is not None else ((true or 0) + 1) % self.vocab_size)
            run = run and right
            planned += int(run)
        self.proposals += 1
        self.drafted += n
        self.planned_accepted += planned
        known = min(n, max(len(record) - start, 0))
        self.expected_accepted += sum(self.p ** j for j in range(1, known + 1))
        return drafts

    def observe(self) -> None:
        """Nothing to do after a target step."""

    def verified(self, request: Request) -> None:
        """Nothing to do after a verification step."""

    def forget(self, request_id: str) -> None:
        """Nothing of a request is kept but whether it left the recording."""

    def counters(self) -> dict[str, float]:
        """The counters since the last reset, and the mean acceptance length they imply (expected and planned)."""
        steps = max(self.proposals, 1)
        return {"proposals": self.proposals, "drafted": self.drafted, "planned_accepted": self.planned_accepted,
                "expected_accepted": self.expected_accepted, "off_record": self.off_record,
                "expected_acceptance_length": 1 + self.expected_accepted / steps,
                "planned_acceptance_length": 1 + self.planned_accepted / steps}


def install_oracle(llm: LLM, oracle: OracleProposer) -> None:
    """Make ``oracle`` the proposer of ``llm``'s engine, which must have been built with a speculative config
    whose drafts need no model (``method`` "ngram"): the config sizes the verification steps, and a proposer in
    place makes the engine ask for placeholder drafts, which the oracle fills."""
    engine = llm.llm_engine
    if engine.speculative is None:
        raise ValueError("the oracle needs an engine built with a speculative config, e.g. "
                         "{'method': 'ngram', 'num_speculative_tokens': k}")
    if engine.draft is not None:
        raise ValueError(f"the engine already runs a proposer ({type(engine.draft).__name__}); build it with "
                         "method 'ngram' so that the oracle's drafts are the only ones")
    engine.draft = oracle
