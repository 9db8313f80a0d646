"""The engine's table of live requests: each request the caller added (a parent), its ``n`` sequences (children,
each a scheduler ``Request`` with its output state and seeded generator), and which need host tokens each step."""

from __future__ import annotations

from typing import Any

import torch

from revolta_engine.core.request import Request
from revolta_engine.engine.output_processor import CompletionState, ParentRequestState
from revolta_engine.outputs import RequestOutput
from revolta_engine.sampling_params import SamplingParams

ChildEntry = tuple[ParentRequestState, CompletionState, torch.Generator | None]


class RequestTable:
    """Parents by request id, children by sequence id; a parent leaves with all its children."""

    def __init__(self) -> None:
        self.parents: dict[str, ParentRequestState] = {}
        self.children: dict[str, ChildEntry] = {}
        self.sync_ids: set[str] = set()  # live requests whose sampling needs the previous token on the host

    def __contains__(self, request_id: str) -> bool:
        return request_id in self.parents

    def __bool__(self) -> bool:
        return bool(self.parents)

    def add(self, request_id: str, text: str | None, ids: list[int], params: SamplingParams, max_tokens: int,
            eos_token_ids: set[int], arrival: float, priority: int, *, bad_words: Any, grammar: Any,
            grammars: Any, tokenizer: Any, device: torch.device) -> list[Request]:
        """Fan the request out into its ``params.n`` sequences (ids ``i_<request_id>`` when n > 1; seeds
        ``seed + i``) and register them; returns the scheduler requests, in order."""
        states = []
        for i in range(params.n):
            child_id = request_id if params.n == 1 else f"{i}_{request_id}"
            req = Request(child_id, ids, params, max_tokens, eos_token_ids, arrival, priority)
            req.bad_words_ids = bad_words
            if grammar is not None:
                req.grammar = grammars.new_state(grammar)  # one matcher per sequence
            states.append(CompletionState(i, req, tokenizer))
        parent = ParentRequestState(request_id, text, ids, params, states, arrival)
        self.parents[request_id] = parent
        if params.needs_host_tokens:
            self.sync_ids.add(request_id)
        for i, state in enumerate(states):
            gen = torch.Generator(device=device).manual_seed(params.seed + i) if params.seed is not None else None
            self.children[state.request.request_id] = (parent, state, gen)
        return [state.request for state in states]

    def parent_of(self, child_id: str) -> ParentRequestState:
        """The parent of a live sequence."""
        return self.children[child_id][0]

    def generator(self, child_id: str) -> torch.Generator | None:
        """A sequence's own generator (a request with a seed), else None."""
        return self.children[child_id][2]

    def pop(self, request_id: str) -> ParentRequestState | None:
        """Remove a parent and its children (None when unknown)."""
        parent = self.parents.pop(request_id, None)
        if parent is not None:
            self.sync_ids.discard(request_id)
            for state in parent.children:
                self.children.pop(state.request.request_id, None)
        return parent

    def outputs(self, touched: dict[str, ParentRequestState]) -> list[RequestOutput]:
        """The outputs of the requests a step ``touched`` (those with something to report); finished ones leave."""
        outputs = []
        for parent in touched.values():
            out = parent.make_output()
            if out is not None:
                outputs.append(out)
            if parent.finished:
                self.pop(parent.request_id)
        return outputs
