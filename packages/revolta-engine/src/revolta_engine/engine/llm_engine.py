"""The synchronous engine: ``step()`` = schedule -> execute -> sample -> update. Its configuration is resolved
before it exists (:mod:`revolta_engine.config`), its parts are built by :mod:`revolta_engine.engine.assembly`."""

from __future__ import annotations

import logging
import time
from typing import Any

from revolta_engine.config import EngineArgs, EngineConfig, open_checkpoint, resolve_engine_config
from revolta_engine.config.resolve import text_config_of
from revolta_engine.core.kv_connector import run_transfers
from revolta_engine.core.request import RequestStatus
from revolta_engine.engine.assembly import assemble_engine
from revolta_engine.engine.chat import render_chat
from revolta_engine.engine.inflight import HostTokenCopy, InFlightStep
from revolta_engine.engine.output_processor import ParentRequestState
from revolta_engine.engine.prompt_input import encode_prompt, prepare_prompt
from revolta_engine.engine.prompt_logprobs import plan_prompt_rows, record_prompt_logprobs
from revolta_engine.engine.recurrent_state import RecurrentStateSteps
from revolta_engine.engine.request_table import RequestTable
from revolta_engine.engine.stats import EngineStats
from revolta_engine.errors import InvalidRequestError
from revolta_engine.loader.checkpoint import Checkpoint
from revolta_engine.outputs import RequestOutput
from revolta_engine.sample.bad_words import bad_words_token_ids
from revolta_engine.sample.sampler import sampling_row
from revolta_engine.sample.structured import advance_grammar
from revolta_engine.sampling_params import SamplingParams
from revolta_engine.spec_decode import NgramProposer, accepted_tokens, next_drafts, wants_drafts

logger = logging.getLogger(__name__)


class LLMEngine:
    """Owns the model, the KV cache, the scheduler and the per-request output state.

    Built from a resolved :class:`EngineConfig` (``checkpoint``: the one it names, when already open), or from
    ``EngineArgs`` as :meth:`from_engine_args` does. Not thread-safe: drive it from one thread (the serving layer
    runs it in its own process).
    """

    def __init__(self, config: EngineConfig | EngineArgs, checkpoint: Checkpoint | None = None) -> None:
        if isinstance(config, EngineArgs):
            checkpoint = checkpoint or open_checkpoint(config)
            config = resolve_engine_config(config, checkpoint)
        self.config, self.args, self.device = config, config.args, config.device
        p = self.parts = assemble_engine(config, checkpoint or open_checkpoint(config.args))
        self.checkpoint, self.hf_config, self.tokenizer = p.checkpoint, p.checkpoint.hf_config, p.checkpoint.tokenizer
        self.text_config, self.kv_capacity_tokens = text_config_of(self.hf_config), p.kv.capacity_tokens
        self.model, self.runner, self.tp_workers, self.sampler = p.model, p.runner, p.tp_workers, p.sampler
        self.kv, self.kv_connector, self.scheduler, self.draft = p.kv, p.kv_connector, p.scheduler, p.draft
        self.grammars, self.generator, self.eos_token_ids = p.grammars, p.generator, p.eos_token_ids
        model, sched = config.model, config.scheduler
        self.dtype, self.max_model_len, self.max_logprobs = model.dtype, model.max_model_len, model.max_logprobs
        self.served_model_name, self.default_sampling = model.served_model_name, dict(model.sampling_defaults)
        self.chat_template = model.chat_template or p.checkpoint.chat_template
        self.states = (RecurrentStateSteps(self.kv, self.runner, p.caches.scratch_slot, config.num_speculative_tokens)
                       if p.caches.state_caches else None)  # hybrid models
        self.speculative, self.async_scheduling, self.policy = config.speculative, sched.async_scheduling, sched.policy
        self.requests, self.stats = RequestTable(), EngineStats()
        spec = self.speculative  # n-gram drafts: which requests could draft after a token still in flight
        self.ngram = (NgramProposer(spec.prompt_lookup_max, spec.prompt_lookup_min)
                      if spec is not None and spec.method == "ngram" else None)
        self._host_tokens = HostTokenCopy(sched.max_num_seqs, self.device)
        self._inflight: InFlightStep | None = None

    @classmethod
    def from_engine_args(cls, args: EngineArgs) -> LLMEngine:
        """Resolve ``args`` (opening the checkpoint once) and build the engine, as vLLM's constructor does."""
        return cls(args)

    # ----------------------------------------------------------------------------------- info
    def config_report(self) -> list[tuple[str, Any, str]]:
        """Every resolved option as ``(name, value, source)``, then every set ``REVOLTA_*`` variable."""
        return self.config.report(self.parts.measured)

    def apply_chat_template(self, messages: list[dict], *, add_generation_prompt: bool = True,
                            tools: list[dict] | None = None, chat_template: str | None = None,
                            **template_kwargs: Any) -> str:
        """Render ``messages`` with the model's chat template (or ``chat_template``)."""
        return render_chat(self.tokenizer, chat_template or self.chat_template, messages,
                           add_generation_prompt=add_generation_prompt, tools=tools, **template_kwargs)

    def tokenize_prompt(self, prompt: str) -> list[int]:
        """Tokenize a text prompt, adding BOS unless the text already starts with it."""
        return encode_prompt(self.tokenizer, prompt)

    # ------------------------------------------------------------------------------- requests
    def add_request(self, request_id: str, prompt: str | list[int] | dict, params: SamplingParams,
                    arrival_time: float | None = None, priority: int = 0) -> None:
        """Validate and queue a request; raises InvalidRequestError (engine state unchanged) on bad input.
        ``priority``: under the priority scheduling policy, lower values are admitted first and preempted last."""
        if priority and self.policy != "priority":
            raise InvalidRequestError(f"priority {priority} needs the priority scheduling policy (this engine "
                                      "schedules first come first served)", param="priority")
        if request_id in self.requests:
            raise InvalidRequestError(f"request id {request_id!r} is already running", param="request_id")
        if isinstance(params, SamplingParams):
            params.validate()
            params.check_logprobs_limit(self.max_logprobs)
        text, ids = prepare_prompt(prompt, params, self.tokenize_prompt, self.max_model_len,
                                   int(self.text_config.vocab_size), self.kv.block_size, self.kv.pool.num_usable_blocks)
        bad_words = bad_words_token_ids(self.tokenizer, params.bad_words)
        max_tokens = params.max_tokens or (self.max_model_len - len(ids))
        # Compiled here, before anything is queued: a constraint that cannot compile fails this request only.
        grammar = self.grammars.compile(params.structured_outputs) if params.structured_outputs else None
        arrival = arrival_time if arrival_time is not None else time.monotonic()
        for req in self.requests.add(request_id, text, ids, params, max_tokens, self.eos_token_ids, arrival, priority,
                                     bad_words=bad_words, grammar=grammar, grammars=self.grammars,
                                     tokenizer=self.tokenizer, device=self.device):
            self.scheduler.add(req)

    def abort_request(self, request_ids: list[str]) -> None:
        """Stop requests now and free their KV blocks (unknown ids are ignored)."""
        for rid in request_ids:
            parent = self.requests.pop(rid)
            for state in parent.children if parent is not None else ():
                self._forget(state.request.request_id)
                if not state.request.status.finished:
                    self.scheduler.finish(state.request, RequestStatus.FINISHED_ABORTED)
        run_transfers(self.kv_connector, self.kv)  # the aborted requests' full blocks go to the offload tiers now

    def _forget(self, request_id: str) -> None:
        for proposer in (self.draft, self.ngram):
            if proposer is not None:
                proposer.forget(request_id)

    def has_unfinished_requests(self) -> bool:
        """Whether any added request has not finished (or been aborted)."""
        return bool(self.requests)

    def get_stats(self) -> EngineStats:
        """A snapshot (a copy the caller owns) of the current load and cumulative counters."""
        return self.stats.snapshot(self.scheduler, self.kv)

    # ----------------------------------------------------------------------------------- step
    def step(self) -> list[RequestOutput]:
        """Run one scheduling step; return outputs of the requests that progressed or finished. With asynchronous
        scheduling the step launched here is finished (tokens appended and reported) by the next call."""
        touched: dict[str, ParentRequestState] = {}
        if self._inflight is not None and self._needs_tokens_first(self._inflight):
            self._finish(self._inflight, touched)  # this step's sampling (or drafts) needs the last tokens
            self._inflight = None
        sched = self.scheduler.schedule()
        for req in sched.failed:
            parent = self.requests.parent_of(req.request_id)
            self.scheduler.finish(req, RequestStatus.FINISHED_ABORTED)
            logger.warning("request %s aborted: %s", parent.request_id, req.stop_reason)
            touched[parent.request_id] = parent
        launched = self._launch(sched) if sched.scheduled else None
        if self._inflight is not None:
            self._finish(self._inflight, touched)
        self._inflight = None
        if launched is not None and launched.completing:
            if not self._needs_tokens_first(launched):
                self._inflight = launched
            else:
                self._finish(launched, touched)
        if launched is not None and self.draft is not None:  # a model proposer: synchronous, the step is finished
            self.draft.observe()
        run_transfers(self.kv_connector, self.kv)  # blocks published by requests that finished in this step
        return self.requests.outputs(touched)

    def _needs_tokens_first(self, step: InFlightStep) -> bool:
        """Whether ``step``'s sampled tokens must reach the host before the next step is scheduled: always in the
        synchronous loop; with asynchronous scheduling when some request's sampling needs them, when the step
        verified drafts (the kept ones decide the next positions), when a model proposes the drafts, or when an
        n-gram lookup after the token in flight could find drafts."""
        if not self.async_scheduling or self.requests.sync_ids:
            return True
        if self.speculative is None:
            return False
        if self.draft is not None or any(s.num_drafts for s in step.completing):
            return True
        ngram = self.ngram
        return ngram is None or any(ngram.may_draft(s.request) for s in step.completing
                                    if not s.request.status.finished and wants_drafts(s.request))

    def _launch(self, sched) -> InFlightStep:
        """Run the model and the sampler on the scheduled batch without waiting for the device."""
        now = time.monotonic()
        self.stats.note_iteration(sched.num_tokens)
        run_transfers(self.kv_connector, self.kv)  # offloaded blocks in before the forward pass reads them
        tables = [self.kv.block_ids(s.request.request_id) for s in sched.scheduled]
        completing = [s for s in sched.scheduled if s.completes]
        prompt_rows = plan_prompt_rows(sched.scheduled, self.requests.children)
        keep = prompt_rows.rows if prompt_rows is not None else None
        if self.draft is not None:
            self.draft.propose(sched.scheduled, tables)  # the drafts this step verifies
        if self.states is not None:
            logits = self.states.execute(sched.scheduled, tables, keep)
        else:
            logits = self.runner.execute(sched.scheduled, tables, keep_rows=keep)
        if prompt_rows is not None and self.runner.kept_hidden is not None:
            record_prompt_logprobs(self.runner.kept_hidden, prompt_rows, self.model.compute_logits)
        rows = []
        for s in completing:
            req = s.request
            row = sampling_row(req, self.requests.generator(req.request_id) or self.generator, self.eos_token_ids)
            rows += [row] * (s.num_drafts + 1)  # one per speculative position (see spec_decode.verify)
        kept_logits = pending = None
        if rows:
            tokens = self.sampler.sample(logits, rows)
            self.runner.record_sampled(tokens, [s.request.request_id for s in completing
                                                for _ in range(s.num_drafts + 1)])
            if any(r.params.logprobs is not None for r in rows):
                kept_logits = logits  # read once the tokens are back
            pending = self._host_tokens.start(tokens)
        for s in sched.scheduled:
            self.scheduler.advance(s)
            parent = self.requests.parent_of(s.request.request_id)
            if parent.metrics.first_scheduled_time is None:
                parent.metrics.first_scheduled_time = now
            if s.request.num_cached_tokens >= 0 and s.request.num_computed_tokens <= s.request.num_prompt_tokens:
                self.stats.num_prompt_tokens += s.num_new_tokens
        for s in completing:
            s.request.num_pending_tokens += 1
        run_transfers(self.kv_connector, self.kv)  # blocks this pass filled, copied out after it on the stream
        return InFlightStep(sched.scheduled, completing, rows, kept_logits, pending)

    def shutdown(self) -> None:
        """Finish what the engine owes outside its process (queued KV offload stores, tensor-parallel workers)."""
        if self.kv_connector is not None:
            run_transfers(self.kv_connector, self.kv)
            self.kv_connector.close()
        if self.tp_workers is not None:
            self.tp_workers.stop()

    def _finish(self, step: InFlightStep, touched: dict[str, ParentRequestState]) -> None:
        """Append a launched step's sampled tokens, check stops and update the outputs."""
        if step.tokens is None:
            return
        token_ids = step.tokens.wait()
        logprobs = (self.sampler.logprobs(step.logits, token_ids, step.rows) if step.logits is not None
                    else [None] * len(token_ids))
        row = 0
        for s in step.completing:
            req, first = s.request, row
            row += s.num_drafts + 1
            entry = self.requests.children.get(req.request_id)
            if entry is None or req.status.finished:
                continue  # finished or aborted while this step ran: its tokens are discarded
            parent, state, _ = entry
            new_tokens = token_ids[first:first + 1]
            if s.num_drafts:
                new_tokens = accepted_tokens(req.spec_token_ids[:s.num_drafts], token_ids[first:row])
                req.num_computed_tokens -= s.num_drafts - (len(new_tokens) - 1)  # rejected drafts' KV is stale
                self.stats.note_drafts(s.num_drafts, len(new_tokens) - 1)
            req.spec_token_ids = []
            for i, token in enumerate(new_tokens):
                req.append_token(token)
                self.stats.num_generation_tokens += 1
                req.check_token_stop(self.max_model_len)
                if req.grammar is not None:
                    advance_grammar(req, token)
                state.on_token(token, logprobs[first + i])
                parent.note_token()
                if req.status.finished:
                    self.scheduler.finish(req, req.status)
                    self._forget(req.request_id)
                    break
            if self.draft is not None and s.num_drafts:
                self.draft.verified(req)  # its cache keeps what it was fed of the tokens just kept
            if self.states is not None and not req.status.finished:  # rejected drafts (or padding) undone
                self.states.keep_tokens(req, s.num_new_tokens - s.num_drafts + len(new_tokens) - 1)
            if (self.speculative is not None and not req.status.finished and not req.num_pending_tokens
                    and wants_drafts(req)):  # (a token still in flight: the next step is launched already)
                req.spec_token_ids = next_drafts(self.speculative, req, self.max_model_len, self.draft is not None)
            touched[parent.request_id] = parent
