"""The synchronous engine: ``step()`` = schedule -> execute -> sample -> update."""

from __future__ import annotations

import logging
import time
from typing import Any

import torch

import revolta_kernels
from revolta_engine.config import (
    ConfigResolver,
    EngineArgs,
    choose_dtype,
    native_kernels_note,
    resolve_device,
    resolve_max_model_len,
)
from revolta_engine.core.kv_cache_manager import KVCacheManager
from revolta_engine.core.request import Request, RequestStatus
from revolta_engine.core.request_queue import POLICIES
from revolta_engine.core.scheduler import Scheduler
from revolta_engine.engine.cache_setup import log_kv_capacity
from revolta_engine.engine.chat import render_chat
from revolta_engine.engine.checkpoint_options import open_checkpoint, resolve_checkpoint_options
from revolta_engine.engine.engine_runtime import build_engine_runtime, check_tensor_parallel
from revolta_engine.engine.inflight import HostTokenCopy, InFlightStep
from revolta_engine.engine.kv_offload_setup import offload_connector, resolve_offload_options
from revolta_engine.engine.output_processor import CompletionState, ParentRequestState
from revolta_engine.engine.prompt_input import (
    check_prompt_ids,
    check_sampling_token_ids,
    encode_prompt,
    prompt_text_and_ids,
    truncate_prompt,
)
from revolta_engine.engine.prompt_logprobs import plan_prompt_rows, record_prompt_logprobs
from revolta_engine.engine.stats import EngineStats
from revolta_engine.errors import InvalidRequestError
from revolta_engine.layers.activation_quant import check_activation_quant
from revolta_engine.outputs import RequestOutput
from revolta_engine.parallel.shard_runtime import ShardSettings
from revolta_engine.sample.bad_words import bad_words_token_ids
from revolta_engine.sample.sampler import Sampler, sampling_row
from revolta_engine.sample.structured import GrammarBackend, advance_grammar
from revolta_engine.sampling_params import SamplingParams
from revolta_engine.spec_decode import (
    accepted_tokens,
    draft_state_snapshots,
    load_proposer,
    next_drafts,
    parse_speculative_config,
    wants_drafts,
)
from revolta_engine.worker.kv_cache import resolve_kv_cache_dtype

logger = logging.getLogger(__name__)


class LLMEngine:
    """Owns the model, the KV cache, the scheduler and the per-request output state.

    Not thread-safe: drive it from one thread (the serving layer runs it in its own process).
    """

    def __init__(self, args: EngineArgs) -> None:
        self.args = args
        cfg = self.resolver = ConfigResolver(args)
        self.checkpoint = open_checkpoint(cfg)
        model_path = cfg.values["model"].value
        self.device = resolve_device(cfg.resolve("device"))
        cfg.set("device", str(self.device), "user" if "device" in args.explicit else "profile")
        self.hf_config = hf_config = self.checkpoint.hf_config
        self.tokenizer = self.checkpoint.tokenizer
        self.chat_template = args.chat_template or self.checkpoint.chat_template
        self.eos_token_ids: set[int] = set(self.checkpoint.eos_token_ids)
        self.served_model_name = cfg.resolve("served_model_name") or str(model_path)
        self.default_sampling = resolve_checkpoint_options(cfg, self.checkpoint)  # request sampling defaults
        cfg.set("served_model_name", self.served_model_name,
                "user" if "served_model_name" in args.explicit else "default")

        ckpt_dtype = getattr(hf_config, "dtype", None)
        if isinstance(ckpt_dtype, str):
            ckpt_dtype = getattr(torch, ckpt_dtype, None)
        self.dtype, source = choose_dtype(args.dtype, ckpt_dtype, self.device)
        cfg.set("dtype", str(self.dtype).removeprefix("torch."), source)
        if self.device.type == "cuda" and self.dtype == torch.bfloat16 and torch.cuda.get_device_capability()[0] < 8:
            raise InvalidRequestError("bfloat16 needs compute capability 8.0 or newer; use --dtype float16",
                                      param="dtype")
        note = native_kernels_note(self.device, revolta_kernels.native_available(), revolta_kernels.native_status())
        if note:
            logger.warning(note)
        check_activation_quant(cfg.resolve("activation_quant"))  # given to the model's layers when it is built

        # multimodal checkpoints keep the language model's settings in a text sub-config
        self.text_config = hf_config.get_text_config() if hasattr(hf_config, "get_text_config") else hf_config
        self.max_model_len = resolve_max_model_len(cfg, self.text_config)
        block_size = cfg.resolve("block_size")
        default_batched = 2048 if self.device.type == "cpu" else 8192
        max_batched = cfg.resolve("max_num_batched_tokens", default_batched, parse=int)
        max_seqs = cfg.resolve("max_num_seqs")
        enable_caching = cfg.resolve("enable_prefix_caching")
        cfg.resolve("seed")
        for name in ("tensor_parallel_size", "enforce_eager", "load_format"):
            cfg.resolve(name)
        # Overlap the host's work for the next step with the device's work on this one (GPU only: on the
        # CPU the forward pass itself runs on the host). Hybrid models too: their state slots follow the
        # stream's order, and a snapshot of a block whose last token is in flight is keyed once it arrives.
        self.speculative = parse_speculative_config(cfg.resolve("speculative_config"))
        # Drafts are proposed from the newest tokens on the host: speculation runs the synchronous loop.
        self.async_scheduling = bool(cfg.resolve("async_scheduling", self.device.type == "cuda"
                                                 and self.speculative is None))
        if self.async_scheduling and self.speculative is not None:
            raise InvalidRequestError("speculative decoding needs async_scheduling off (drafts come from the "
                                      "newest tokens on the host)", param="speculative_config")
        self.policy, self.max_logprobs = cfg.resolve("scheduling_policy"), int(cfg.resolve("max_logprobs"))
        if self.policy not in POLICIES:
            raise InvalidRequestError(f"scheduling_policy must be one of {', '.join(POLICIES)}, got {self.policy!r}",
                                      param="scheduling_policy")
        kv_dtype = resolve_kv_cache_dtype(args.kv_cache_dtype, self.dtype)
        cfg.set("kv_cache_dtype", str(kv_dtype).removeprefix("torch."),
                "user" if "kv_cache_dtype" in args.explicit else "default")
        settings = ShardSettings(args, str(model_path), self.dtype, self.max_model_len, block_size, max_batched,
                                 max_seqs, enable_caching, kv_dtype, str(cfg.values["activation_quant"].value),
                                 args.tensor_parallel_size, str(self.device))
        offload = resolve_offload_options(cfg)  # checked before the model loads
        check_tensor_parallel(settings, hf_config, self.device)
        self.draft = load_proposer(self.speculative, self.checkpoint, int(self.text_config.vocab_size), settings)
        settings.draft_kv_bytes_per_block = self.draft.bytes_per_block if self.draft is not None else 0
        self.max_drafts = self.speculative.num_speculative_tokens if self.speculative is not None else 0
        settings.scratch_state_slots = max_seqs * self.max_drafts  # used by hybrid models only
        weights = None if args.load_format == "dummy" else self.checkpoint.iter_weights()
        runtime, self.runner, self.tp_workers = build_engine_runtime(hf_config, weights, settings, self.device, cfg,
                                                                     args.enforce_eager)
        if weights is not None:
            self.checkpoint.check_all_shards_read()
        self.model, spec, caches = runtime.model, runtime.spec, runtime.caches
        num_blocks, kv_caches, state_slots = caches.num_blocks, caches.kv_caches, caches.state_slots
        self.state_caches = caches.state_caches
        self.scratch_slot = caches.scratch_slot  # hybrid speculation: the states after each draft position
        self._draft_states: dict[str, int] = {}
        self.kv_connector = offload_connector(offload, settings, self.checkpoint.path, spec, kv_caches, self.device,
                                              hybrid=state_slots is not None)
        self.kv = KVCacheManager(num_blocks, block_size, enable_caching, state_slots, self.kv_connector)
        self.kv.drop_last_hit_block = self.draft is not None and self.draft.reads_target_hidden
        self.kv_capacity_tokens = self.kv.capacity_tokens
        self.scheduler = Scheduler(self.kv, max_seqs, max_batched, self.max_model_len, self.policy)
        if self.draft is not None:
            self.draft.allocate(num_blocks, max_batched, max_seqs, self.runner)
        self.sampler = Sampler()
        self.grammars = GrammarBackend(self.tokenizer, int(self.text_config.vocab_size), self.eos_token_ids)
        self.generator = torch.Generator(device=self.device).manual_seed(args.seed)
        self._host_tokens = HostTokenCopy(max_seqs, self.device)
        self._inflight: InFlightStep | None = None
        self._sync_ids: set[str] = set()  # live requests whose sampling needs the previous token on the host
        self.parents: dict[str, ParentRequestState] = {}
        self.children: dict[str, tuple[ParentRequestState, CompletionState, torch.Generator | None]] = {}
        self.stats = EngineStats()
        log_kv_capacity(spec, num_blocks, self.kv_capacity_tokens, self.max_model_len)

    # ----------------------------------------------------------------------------------- info
    def config_report(self) -> list[tuple[str, Any, str]]:
        """Every resolved option as ``(name, value, source)``."""
        return self.resolver.report()

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
        if request_id in self.parents:
            raise InvalidRequestError(f"request id {request_id!r} is already running", param="request_id")
        if isinstance(params, SamplingParams):
            params.validate()
            params.check_logprobs_limit(self.max_logprobs)
        text, ids = prompt_text_and_ids(prompt, self.tokenize_prompt)
        ids = truncate_prompt(ids, params.truncate_prompt_tokens, self.max_model_len)
        bad_words = bad_words_token_ids(self.tokenizer, params.bad_words)
        vocab = int(self.text_config.vocab_size)
        check_prompt_ids(ids, vocab, self.max_model_len, self.kv.block_size, self.kv.pool.num_usable_blocks)
        check_sampling_token_ids(params.allowed_token_ids, params.logit_bias, vocab)
        max_tokens = params.max_tokens or (self.max_model_len - len(ids))
        # Compiled here, before anything is queued: a constraint that cannot compile fails this request only.
        grammar = self.grammars.compile(params.structured_outputs) if params.structured_outputs else None
        arrival = arrival_time if arrival_time is not None else time.monotonic()
        states = []
        for i in range(params.n):
            child_id = request_id if params.n == 1 else f"{i}_{request_id}"
            req = Request(child_id, ids, params, max_tokens, self.eos_token_ids, arrival, priority)
            req.bad_words_ids = bad_words
            if grammar is not None:
                req.grammar = self.grammars.new_state(grammar)  # one matcher per sequence
            states.append(CompletionState(i, req, self.tokenizer))
        parent = ParentRequestState(request_id, text, ids, params, states, arrival)
        self.parents[request_id] = parent
        if params.needs_host_tokens:
            self._sync_ids.add(request_id)
        for i, state in enumerate(states):
            gen = None
            if params.seed is not None:
                gen = torch.Generator(device=self.device).manual_seed(params.seed + i)
            self.children[state.request.request_id] = (parent, state, gen)
            self.scheduler.add(state.request)

    def abort_request(self, request_ids: list[str]) -> None:
        """Stop requests now and free their KV blocks (unknown ids are ignored)."""
        for rid in request_ids:
            parent = self.parents.pop(rid, None)
            if parent is None:
                continue
            self._sync_ids.discard(rid)
            for state in parent.children:
                self.children.pop(state.request.request_id, None)
                if self.draft is not None:
                    self.draft.forget(state.request.request_id)
                if not state.request.status.finished:
                    self.scheduler.finish(state.request, RequestStatus.FINISHED_ABORTED)
        self._transfer_kv()  # full blocks of the aborted requests go to the offload tiers now

    def has_unfinished_requests(self) -> bool:
        return bool(self.parents)

    def get_stats(self) -> EngineStats:
        """A snapshot (a copy the caller owns) of the current load and cumulative counters."""
        return self.stats.snapshot(self.scheduler, self.kv)

    # ----------------------------------------------------------------------------------- step
    def step(self) -> list[RequestOutput]:
        """Run one scheduling step; return outputs of the requests that progressed or finished.

        With asynchronous scheduling the step launched here is finished (its tokens appended and
        reported) by the next call, after that call has launched its own step.
        """
        touched: dict[str, ParentRequestState] = {}
        if self._inflight is not None and (not self.async_scheduling or self._sync_ids):
            self._finish(self._inflight, touched)  # this step's sampling needs the last tokens on the host
            self._inflight = None
        sched = self.scheduler.schedule()
        for req in sched.failed:
            parent, _, _ = self.children[req.request_id]
            self.scheduler.finish(req, RequestStatus.FINISHED_ABORTED)
            logger.warning("request %s aborted: %s", parent.request_id, req.stop_reason)
            touched[parent.request_id] = parent
        launched = self._launch(sched) if sched.scheduled else None
        if self._inflight is not None:
            self._finish(self._inflight, touched)
        self._inflight = None
        if launched is not None and launched.completing:
            if self.async_scheduling and not self._sync_ids:
                self._inflight = launched
            else:
                self._finish(launched, touched)
        if launched is not None and self.draft is not None:  # speculation: synchronous, the step is finished
            self.draft.observe()
        self._transfer_kv()  # blocks published by requests that finished in this step
        outputs = []
        for parent in touched.values():
            out = parent.make_output()
            if out is not None:
                outputs.append(out)
            if parent.finished:
                self.parents.pop(parent.request_id, None)
                self._sync_ids.discard(parent.request_id)
                for state in parent.children:
                    self.children.pop(state.request.request_id, None)
        return outputs

    def _launch(self, sched) -> InFlightStep:
        """Run the model and the sampler on the scheduled batch without waiting for the device."""
        now = time.monotonic()
        self.stats.note_iteration(sched.num_tokens)
        self._transfer_kv()  # offloaded blocks in before the forward pass reads them
        tables = [self.kv.block_ids(s.request.request_id) for s in sched.scheduled]
        completing = [s for s in sched.scheduled if s.completes]
        prompt_rows = plan_prompt_rows(sched.scheduled, self.children)
        keep = prompt_rows.rows if prompt_rows is not None else None
        if self.draft is not None:
            self.draft.propose(sched.scheduled, tables)  # the drafts this step verifies
        if self.state_caches:
            slots, sources = self.kv.state_slots.take_pending()  # type: ignore[union-attr]
            self.runner.reset_state_slots(slots, sources)
            snapshots = self.kv.plan_snapshots([(s.request, s.num_new_tokens) for s in sched.scheduled])
            draft_snaps, self._draft_states = draft_state_snapshots(sched.scheduled, self.scratch_slot, self.max_drafts)
            state_slots = [self.kv.state_slot(s.request.request_id) for s in sched.scheduled]
            logits = self.runner.execute(sched.scheduled, tables, state_slots, snapshots + draft_snaps, keep_rows=keep)
        else:
            logits = self.runner.execute(sched.scheduled, tables, keep_rows=keep)
        if prompt_rows is not None and self.runner.kept_hidden is not None:
            record_prompt_logprobs(self.runner.kept_hidden, prompt_rows, self.model.compute_logits)
        rows = []
        for s in completing:
            req = s.request
            row = sampling_row(req, self.children[req.request_id][2] or self.generator, self.eos_token_ids)
            rows += [row] * (s.num_drafts + 1)  # one per speculative position (see engine.speculative)
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
            parent = self.children[s.request.request_id][0]
            if parent.metrics.first_scheduled_time is None:
                parent.metrics.first_scheduled_time = now
            if s.request.num_cached_tokens >= 0 and s.request.num_computed_tokens <= s.request.num_prompt_tokens:
                self.stats.num_prompt_tokens += s.num_new_tokens
        for s in completing:
            s.request.num_pending_tokens += 1
        self._transfer_kv()  # blocks this forward pass filled, copied out after it on the stream
        return InFlightStep(sched.scheduled, completing, rows, kept_logits, pending)

    def _transfer_kv(self) -> None:
        """Hand the KV connector the blocks to store, then copy fetched blocks in (stores first: a block
        freed and reused for a load in the same step must be read before it is overwritten)."""
        if self.kv_connector is None:
            return
        saves, loads = self.kv.take_transfers()
        if saves:
            self.kv_connector.save([h for h, _ in saves], [b for _, b in saves])
        if loads:
            self.kv_connector.load([b for b, _ in loads], [d for _, d in loads])

    def shutdown(self) -> None:
        """Finish what the engine owes outside its process: queued KV offload stores, the tensor-parallel
        workers. Idempotent."""
        if self.kv_connector is not None:
            self._transfer_kv()
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
            entry = self.children.get(req.request_id)
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
                    if self.draft is not None:
                        self.draft.forget(req.request_id)
                    break
            if self.draft is not None and s.num_drafts:
                self.draft.verified(req)  # its cache keeps what it was fed of the tokens just kept
            if s.num_drafts and self.state_caches and not req.status.finished and len(new_tokens) <= s.num_drafts:
                # hybrid: the recurrent state goes back to the one after the last kept draft
                self.runner.reset_state_slots([self.kv.state_slot(req.request_id)],
                                              [self._draft_states[req.request_id] + len(new_tokens) - 1])
            if self.speculative is not None and not req.status.finished and wants_drafts(req):
                req.spec_token_ids = next_drafts(self.speculative, req, self.max_model_len, self.draft is not None)
            touched[parent.request_id] = parent
