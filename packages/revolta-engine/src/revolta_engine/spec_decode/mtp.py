"""MTP speculative decoding: the checkpoint's own multi-token-prediction head proposes the next tokens
(vLLM's ``speculative_config={"method": "mtp", "num_speculative_tokens": k}``; Qwen3-Next and Qwen3.5).

The head's entry at position ``p`` needs the target's hidden state at ``p`` and the token at ``p + 1``
(:mod:`revolta_engine.models.hybrid_mtp`). So after every target step the head *catches up*: for each request
it runs the entries of the positions the target just computed with the right input (all of a prefill chunk;
of a verification step, the newest token and the kept drafts), in one batched pass over its own paged KV cache
(the target's block ids). The output of a request's last entry gives its first draft for the next step, and the
output hidden state stands in for the target's when the next step's :meth:`MtpProposer.propose` chains the
further drafts (each at the next position, from the token just proposed). Those chained entries are rewritten
with the target's hidden states by the next catch-up.

Drafts are greedy; verification (:mod:`revolta_engine.spec_decode.verify`) keeps the target's distribution,
so a stale entry of the head (blocks shared through the prefix cache, or brought back from KV offload, whose
head entries another request wrote or nobody did) costs accepted drafts, never correctness.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch

from revolta_engine.core.request import Request
from revolta_engine.core.scheduler import ScheduledRequest
from revolta_engine.errors import InvalidRequestError, UnsupportedModelError
from revolta_engine.models.hybrid import HybridForCausalLM
from revolta_engine.models.hybrid_mtp import PREFIX, HybridMTP, mtp_layer_count
from revolta_engine.parallel.step_plan import RemoteScheduled
from revolta_engine.spec_decode.base import Proposer, feed_item, placeholder_drafts
from revolta_engine.spec_decode.mtp_head import (
    StaticHiddenHead,
    attach_head,
    capture_head_graphs,
    head_kv_spec,
)
from revolta_engine.spec_decode.mtp_parallel import MtpPass, send_pass
from revolta_engine.worker.model_runner import ModelRunner

logger = logging.getLogger(__name__)


@dataclass
class _Computed:
    """A request's rows in the target step: where its positions start and its first row in the hidden states."""

    request: Request
    start: int
    row: int
    table: list[int]


class MtpProposer(Proposer):
    """The MTP head, its KV cache and, per request, the first draft and hidden state of its newest entry."""

    reads_target_hidden = True  # its entries need the target's hidden states: see KVCacheManager.drop_last_hit_block

    def __init__(self, head: HybridMTP, *, vocab: int, dtype: torch.dtype, device: torch.device,
                 max_model_len: int, block_size: int, num_drafts: int = 1, enforce_eager: bool = False) -> None:
        self.head = head
        self.vocab = vocab
        self.spec = head_kv_spec(head, block_size, dtype)
        self.device, self.max_model_len = device, max_model_len
        self.dtype, self.num_drafts, self.enforce_eager = dtype, num_drafts, enforce_eager
        self.runner: ModelRunner | None = None
        self._static: StaticHiddenHead | None = None  # the head as its graphs run it (one GPU)
        self._target_runner: Any = None
        self._parallel = False
        self._step: list[_Computed] = []
        # request id -> (its token count then, the first draft, the head's output hidden state of that entry)
        self._next: dict[str, tuple[int, int, torch.Tensor]] = {}
        self.missed = 0  # drafting requests whose head entry was missing (drafts filled with a placeholder)

    @property
    def bytes_per_block(self) -> int:
        """What one block of the head's cache costs (the target's KV budget pays for it)."""
        return self.spec.bytes_per_block

    def allocate(self, num_blocks: int, max_num_batched_tokens: int, max_num_seqs: int, target_runner: Any) -> None:
        """The head's cache over the target's ``num_blocks`` block ids, its runner, and the target's embedding
        and LM head; the target's runner keeps each step's hidden states for :meth:`observe`."""
        inner = getattr(target_runner, "inner", target_runner)  # rank 0's own shard under tensor parallelism
        self._target_runner = inner
        self._parallel = inner is not target_runner  # the workers run each pass too (mtp_parallel)
        self.runner = attach_head(self.head, inner, self.spec, num_blocks, self.device,
                                  max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs,
                                  max_model_len=self.max_model_len)
        if self.device.type == "cuda" and not self._parallel:
            self._static = capture_head_graphs(self.head, self.runner, self.head.hidden_size, max_num_seqs,
                                               self.max_model_len, self.dtype, self.num_drafts, self.enforce_eager)

    # ---------------------------------------------------------------------------------------- drafts
    def next_drafts(self, request: Request, room: int) -> list[int]:
        """Placeholders: :meth:`propose` fills them once the step is scheduled."""
        return placeholder_drafts(room)

    def propose(self, scheduled: list[ScheduledRequest], block_tables: list[list[int]]) -> None:
        """Note where each scheduled request's rows start (for :meth:`observe`), and fill
        ``spec_token_ids[:num_drafts]`` of those that verify drafts this step."""
        self._step, row = [], 0
        for s, table in zip(scheduled, block_tables, strict=True):
            self._step.append(_Computed(s.request, s.request.num_computed_tokens, row, table))
            row += s.num_new_tokens
        chains: list[tuple[Request, int, list[int]]] = []
        hidden: list[torch.Tensor] = []
        for s, table in zip(scheduled, block_tables, strict=True):
            if not s.num_drafts:
                continue
            req = s.request
            entry = self._next.get(req.request_id)
            if entry is None or entry[0] != req.num_tokens:
                self.missed += 1  # verification rejects the placeholder; output stays exact
                req.spec_token_ids[:s.num_drafts] = [0] * s.num_drafts
                continue
            chains.append((req, s.num_drafts, table))
            req.spec_token_ids[0] = entry[1]
            hidden.append(entry[2])
        for i in range(1, max((n for _, n, _ in chains), default=0)):
            live = [j for j, (_, n, _) in enumerate(chains) if n > i]
            # entry at position N - 2 + i: the draft just proposed, after the previous entry's output
            items = [feed_item(chains[j][0].request_id, chains[j][0].num_tokens - 2 + i,
                           [chains[j][0].spec_token_ids[i - 1]], True) for j in live]
            tokens, out = self._run(items, [chains[j][2] for j in live],
                                    torch.stack([hidden[j] for j in live]), list(range(len(live))))
            for k, j in enumerate(live):
                chains[j][0].spec_token_ids[i] = tokens[k]
                hidden[j] = out[k]

    def observe(self) -> None:
        """After a target step (its tokens appended, rejected drafts taken back): run the head's entries for
        the positions the step computed with the right input, from the hidden states the target's runner kept."""
        hidden = self._target_runner.step_hidden
        items: list[RemoteScheduled] = []
        tables, rows, owners = [], [], []
        step_rows: list[tuple[int, int]] = []
        finals: list[int] = []  # rows (in the head's batch) of the requests that will draft next step
        offset = 0
        for c in self._step:
            req = c.request
            valid = req.num_computed_tokens - c.start
            if hidden is None or req.status.finished or valid <= 0:
                continue
            # entries start .. start + valid - 1 read the tokens after them, all known now
            drafts_next = bool(req.spec_token_ids) and c.start + valid == req.num_tokens - 1
            items.append(feed_item(req.request_id, c.start, req.all_token_ids[c.start + 1:c.start + valid + 1],
                               drafts_next))
            tables.append(c.table)
            rows.append(hidden[c.row:c.row + valid])
            step_rows.append((c.row, valid))
            offset += valid
            if drafts_next:
                finals.append(offset - 1)
                owners.append(req)
        self._step = []
        if not items:
            return
        tokens, out = self._run(items, tables, torch.cat(rows), finals, step_rows)
        for k, req in enumerate(owners):
            self._next[req.request_id] = (req.num_tokens, tokens[k], out[k])

    def verified(self, request: Request) -> None:
        """Nothing to do: the next catch-up rewrites the entries the drafts were chained through."""

    def forget(self, request_id: str) -> None:
        """The request finished: nothing of it is kept."""
        self._next.pop(request_id, None)

    def _run(self, items: list[RemoteScheduled], tables: list[list[int]], target_hidden: torch.Tensor,
             keep_rows: list[int], step_rows: list[tuple[int, int]] | None = None) -> tuple[list[int], torch.Tensor]:
        """One pass of the head; the greedy token and output hidden state of each item that completes.
        ``step_rows``: where ``target_hidden`` lies in the target step's rows (the workers slice their own copy)."""
        assert self.runner is not None, "allocate() first"
        if self._parallel:
            send_pass(MtpPass(items, tables, keep_rows or None, step_rows, int(target_hidden.shape[0])),
                      target_hidden)
        static = self._static
        if static is not None:  # the head's graphs (or an eager pass) read the hidden states from its buffer
            logits = self.runner.execute(items, tables,  # type: ignore[arg-type]
                                         before_forward=lambda batch: static.place(target_hidden, batch))
            if logits.shape[0] == 0:
                return [], target_hidden[:0]
            out = self.runner.step_hidden
            assert out is not None
            return logits[:, :self.vocab].argmax(dim=-1).tolist(), out.index_select(
                0, torch.tensor(keep_rows, device=self.device))
        self.head.target_hidden = target_hidden
        try:
            logits = self.runner.execute(items, tables, keep_rows=keep_rows or None)  # type: ignore[arg-type]
        finally:
            self.head.target_hidden = None
        if logits.shape[0] == 0:
            return [], target_hidden[:0]
        kept = self.runner.kept_hidden
        assert kept is not None
        return logits[:, :self.vocab].argmax(dim=-1).tolist(), kept


def load_mtp_proposer(spec: Any, checkpoint: Any, target_vocab: int, settings: Any) -> MtpProposer | None:
    """The MTP head of an ``mtp`` speculative config (None for other methods or none), loaded on the engine's
    device and dtype before the target's cache is planned, so its weights are counted. With tensor parallelism
    this is rank 0's shard of the head; the workers build theirs (:mod:`revolta_engine.spec_decode.mtp_parallel`)."""
    if spec is None or spec.method != "mtp":
        return None
    from revolta_engine.models.registry import resolve_model_class

    config = checkpoint.hf_config
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    if not issubclass(resolve_model_class(config), HybridForCausalLM):
        raise UnsupportedModelError(f"speculative_config method 'mtp' needs a checkpoint with an MTP head "
                                    f"(Qwen3-Next, Qwen3.5); {type(config).__name__} has none")
    head = build_mtp_head(checkpoint, settings, torch.device(settings.device), rank=0)
    logger.info("Speculative decoding with the checkpoint's MTP head")
    return MtpProposer(head, vocab=min(int(text.vocab_size), target_vocab), dtype=settings.dtype,
                       device=torch.device(settings.device), max_model_len=settings.max_model_len,
                       block_size=settings.block_size, num_drafts=spec.num_speculative_tokens,
                       enforce_eager=settings.config.model.enforce_eager)


def build_mtp_head(checkpoint: Any, settings: Any, device: torch.device, rank: int) -> HybridMTP:
    """Rank ``rank``'s shard of the checkpoint's MTP head (the whole head without tensor parallelism), filled from
    its ``mtp.*`` tensors, or random for ``load_format="dummy"``."""
    from revolta_engine.engine.model_builder import default_dtype, fill_dummy_weights
    from revolta_engine.loader.safetensors_weights import SafetensorsWeights
    from revolta_engine.parallel.state import TensorParallelLayout, tensor_parallel_layout

    config = checkpoint.hf_config
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    dummy = settings.args.load_format == "dummy"
    tensors: dict[str, torch.Tensor] = {}
    layers = 0
    if not dummy:
        if not isinstance(checkpoint.weights, SafetensorsWeights):
            raise UnsupportedModelError(f"speculative_config method 'mtp' reads the head from safetensors; "
                                        f"{checkpoint.path} is {checkpoint.format}")
        tensors = checkpoint.weights.tensors_with_prefix(PREFIX)
        if not (layers := mtp_layer_count(tensors)):
            raise InvalidRequestError(f"speculative_config method 'mtp': {checkpoint.path} has no MTP head "
                                      f"(no '{PREFIX}layers.*' tensors; some exports drop them)",
                                      param="speculative_config")
    moe = (any(".mlp.experts." in n or n.endswith(".mlp.gate.weight") for n in tensors) if tensors
           else int(getattr(text, "num_experts", 0) or 0) > 0)
    if getattr(config, "quantization_config", None) and not getattr(text, "quantization_config", None):
        text.quantization_config = config.quantization_config  # multimodal checkpoints: described at the top
    quantized = (any(n.endswith(".qweight") for n in tensors) if tensors
                 else bool(getattr(text, "quantization_config", None)))
    layout = TensorParallelLayout(rank, settings.tensor_parallel_size)
    with tensor_parallel_layout(layout), default_dtype(settings.dtype), torch.device(device):
        head = HybridMTP(text, settings.max_model_len, moe, quantized).eval()
        if dummy:
            fill_dummy_weights(head, settings.args.seed + rank)
        else:
            head.load_weights(tensors, HybridForCausalLM.stacked_params)
    if layers > 1 and rank == 0:
        logger.info("The checkpoint has %d MTP layers; drafts chain the first one", layers)
    return head
