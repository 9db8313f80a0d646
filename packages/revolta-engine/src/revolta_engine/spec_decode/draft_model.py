"""Draft-model speculative decoding: a smaller model of the same vocabulary proposes the next tokens.

The draft model keeps its own KV cache over the same block ids as the target, so a request's block table
serves both. Before each step that verifies drafts, the draft model first catches up on the tokens of the
request it has not seen yet (the whole prompt the first time, then the tokens accepted since), then proposes
greedily one token at a time. On a GPU both run in the draft model's own CUDA graphs (decode graphs for the
chain, verification-sized graphs for catching up on a step's kept tokens). Its cache stays valid for the tokens it was fed that the target kept; a preempted
request (its blocks given away) starts over. Verification is :mod:`revolta_engine.spec_decode.verify`'s, so the
target's distribution is kept exactly.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from revolta_engine.core.request import Request
from revolta_engine.core.scheduler import ScheduledRequest
from revolta_engine.engine.model_builder import load_model
from revolta_engine.errors import InvalidRequestError, UnsupportedModelError
from revolta_engine.parallel.step_plan import RemoteScheduled
from revolta_engine.spec_decode.base import Proposer, feed_item, placeholder_drafts
from revolta_engine.worker.kv_cache import KVCacheSpec, allocate_kv_cache
from revolta_engine.worker.model_runner import ModelRunner

logger = logging.getLogger(__name__)


class DraftModel(Proposer):
    """The draft model, its cache and the per-request record of what its cache holds."""

    reads_target_hidden = False  # it catches up on tokens

    def __init__(self, path: str, *, target_vocab: int, dtype: torch.dtype, device: torch.device,
                 max_model_len: int, block_size: int, seed: int, num_drafts: int = 0,
                 enforce_eager: bool = False) -> None:
        from revolta_engine.loader import load_checkpoint

        checkpoint = load_checkpoint(path, skip_tokenizer_init=True)
        config = checkpoint.hf_config
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        self.vocab = min(int(text.vocab_size), target_vocab)  # ids both models know
        if int(getattr(text, "max_position_embeddings", max_model_len)) < max_model_len:
            raise InvalidRequestError(f"the draft model {path} handles {text.max_position_embeddings} positions, "
                                      f"fewer than max_model_len {max_model_len}", param="speculative_config")
        self.model: Any = load_model(config, checkpoint.iter_weights(), max_model_len, dtype, device, seed)
        checkpoint.check_all_shards_read()
        if hasattr(self.model, "state_cache_spec"):
            raise UnsupportedModelError("a hybrid (Gated DeltaNet) draft model cannot be rolled back past rejected "
                                        "drafts; use an attention-only draft model")
        layers, heads, head_dim = self.model.kv_cache_shape()
        self.spec = KVCacheSpec(layers, heads, head_dim, block_size, dtype)
        self.device, self.dtype, self.max_model_len = device, dtype, max_model_len
        self.num_drafts, self.enforce_eager = num_drafts, enforce_eager
        self.runner: ModelRunner | None = None
        self._fed: dict[str, tuple[int, int]] = {}  # request id -> (tokens its draft KV holds, preemptions then)
        self.budget = 0
        logger.info("Speculative decoding with the draft model %s (%s, %d layers)", path, type(self.model).__name__,
                    layers)

    @property
    def bytes_per_block(self) -> int:
        """What one block of the draft's cache costs (the target's KV budget pays for it)."""
        return self.spec.bytes_per_block

    def allocate(self, num_blocks: int, max_num_batched_tokens: int, max_num_seqs: int,
                 target_runner: Any = None) -> None:
        """The draft's cache over the target's ``num_blocks`` block ids, and its runner (``target_runner``: unused,
        the draft model has its own weights)."""
        caches = allocate_kv_cache(self.spec, num_blocks, self.device)
        self.runner = ModelRunner(self.model, caches, self.spec.block_size, self.device,
                                  max_num_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs,
                                  max_model_len=self.max_model_len)
        self.budget = max_num_batched_tokens
        self.max_seqs = max_num_seqs
        if self.device.type == "cuda":
            # its chain steps are decode steps, its catch-up on a verification's kept tokens one of 1 + k tokens
            from revolta_engine.worker.cuda_graph import capture_decode_graphs

            self.runner.graph_runner = capture_decode_graphs(
                self.model, caches, self.runner.buffers, max_num_seqs, self.max_model_len, self.device, self.dtype,
                enforce_eager=self.enforce_eager, num_drafts=self.num_drafts)

    def next_drafts(self, request: Request, room: int) -> list[int]:
        """Placeholders: :meth:`propose` fills them once the step is scheduled."""
        return placeholder_drafts(room)

    def propose(self, scheduled: list[ScheduledRequest], block_tables: list[list[int]]) -> None:
        """Fill ``spec_token_ids[:num_drafts]`` of the scheduled requests that verify drafts this step."""
        work = [(s.request, s.num_drafts, table) for s, table in zip(scheduled, block_tables, strict=True)
                if s.num_drafts]
        if not work:
            return
        tables = {req.request_id: table for req, _, table in work}
        last = self._catch_up([req for req, _, _ in work], tables)
        drafts: dict[str, list[int]] = {rid: [tok] for rid, tok in last.items()}
        for i in range(1, max(n for _, n, _ in work)):
            step = [(req, drafts[req.request_id][-1]) for req, n, _ in work if n > i]
            items = [feed_item(req.request_id, req.num_tokens + i - 1, [token], True) for req, token in step]
            for (req, _), token in zip(step, self._run(items, [tables[req.request_id] for req, _ in step]),
                                       strict=True):
                drafts[req.request_id].append(token)
        for req, n, _ in work:
            req.spec_token_ids[:n] = drafts[req.request_id][:n]
            # fed: every known token, then drafts 1..n-1 (the last draft is only verified)
            self._fed[req.request_id] = (req.num_tokens + n - 1, req.num_preemptions)

    def verified(self, request: Request) -> None:
        """After a verification step: the draft's cache holds the tokens it was fed that the target kept."""
        fed = self._fed.get(request.request_id)
        if fed is not None:
            self._fed[request.request_id] = (min(fed[0], request.num_tokens - 1), fed[1])

    def forget(self, request_id: str) -> None:
        """The request finished: nothing of it is kept."""
        self._fed.pop(request_id, None)

    def observe(self) -> None:
        """Nothing to do after a target step: the draft model catches up on tokens, not hidden states."""

    def _catch_up(self, requests: list[Request], tables: dict[str, list[int]]) -> dict[str, int]:
        """Feed each request's tokens the draft has not seen, in passes within the token budget; return the first
        draft of each (the draft's greedy token after the newest known token)."""
        pending: dict[str, int] = {}
        for req in requests:
            done, preemptions = self._fed.get(req.request_id, (0, req.num_preemptions))
            # at least the newest token is fed: its logits give the first draft
            pending[req.request_id] = min(done, req.num_tokens - 1) if preemptions == req.num_preemptions else 0
        by_id = {req.request_id: req for req in requests}
        first: dict[str, int] = {}
        while pending:
            items: list[RemoteScheduled] = []
            owners: list[str] = []
            budget = self.budget
            for rid, start in list(pending.items()):
                if budget <= 0 or len(items) == self.max_seqs:
                    break
                req = by_id[rid]
                end = min(req.num_tokens, start + budget)
                items.append(feed_item(rid, start, req.all_token_ids[start:end], end == req.num_tokens))
                owners.append(rid)
                budget -= end - start
                if end == req.num_tokens:
                    del pending[rid]
                else:
                    pending[rid] = end
            tokens = iter(self._run(items, [tables[rid] for rid in owners]))
            for item in items:
                if item.completes:
                    first[item.request.request_id] = next(tokens)
        return first

    def _run(self, items: list[RemoteScheduled], tables: list[list[int]]) -> list[int]:
        """One forward pass of the draft; the greedy token of each item that completes, in order."""
        assert self.runner is not None, "allocate() first"
        logits = self.runner.execute(items, tables)  # type: ignore[arg-type]
        if logits.shape[0] == 0:
            return []
        return logits[:, :self.vocab].argmax(dim=-1).tolist()


def load_draft_model(spec: Any, target_vocab: int, settings: Any) -> DraftModel | None:
    """The draft model of a ``draft_model`` speculative config (None for other methods or none), loaded on the
    engine's device and dtype before the target's cache is planned, so its weights are counted."""
    if spec is None or spec.method != "draft_model":
        return None
    return DraftModel(spec.model, target_vocab=target_vocab, dtype=settings.dtype,
                      device=torch.device(settings.device), max_model_len=settings.max_model_len,
                      block_size=settings.block_size, seed=settings.args.seed,
                      num_drafts=spec.num_speculative_tokens, enforce_eager=settings.config.model.enforce_eager)
