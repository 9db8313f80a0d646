"""The MTP head under tensor parallelism: every rank holds its shard of the head (attention heads and MLP channels
split like the target's layers; ``fc`` and the norms whole) and its own KV cache for it over the same block ids.

Rank 0's :class:`~revolta_engine.spec_decode.mtp.MtpProposer` decides every pass of the head. Before running
one it sends the workers an :class:`MtpPass`: the entries (token ids included), their block tables, the rows
whose output it keeps, and where the target hidden states come from. Those are either rows of the target step
that just ran, which every rank still holds (the catch-up after a step), or a tensor rank 0 broadcasts (the
chained drafts, a few rows). The workers run the same pass on their shard; the collectives inside it (the row
layers' sums, the vocabulary-split LM head's gather to rank 0) meet. Drafts are picked on rank 0 and reach the
workers as token ids in the next pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from revolta_engine.parallel.communication import broadcast_object, broadcast_tensor
from revolta_engine.parallel.step_plan import RemoteScheduled
from revolta_engine.spec_decode.mtp_head import attach_head, head_kv_spec
from revolta_engine.worker.model_runner import ModelRunner


@dataclass
class MtpPass:
    """One pass of the head, as rank 0 sends it to the workers."""

    items: list[RemoteScheduled]
    tables: list[list[int]]
    keep_rows: list[int] | None
    # (first row, rows) slices of the target step's hidden states, in order; None: a tensor of `num_rows` rows
    # follows as a broadcast
    step_rows: list[tuple[int, int]] | None
    num_rows: int


def send_pass(mtp_pass: MtpPass, hidden: torch.Tensor) -> None:
    """Rank 0: tell the workers about the pass it is about to run on ``hidden``."""
    broadcast_object(mtp_pass)
    if mtp_pass.step_rows is None:
        broadcast_tensor(hidden.contiguous())


def step_rows_hidden(step_hidden: torch.Tensor, rows: list[tuple[int, int]]) -> torch.Tensor:
    """The target hidden states of a catch-up pass, from the step's rows."""
    return torch.cat([step_hidden[first:first + n] for first, n in rows])


class MtpWorker:
    """A worker's shard of the head: its cache, its runner, and the passes rank 0 sends."""

    def __init__(self, head: Any, target_runner: ModelRunner, num_blocks: int, settings: Any,
                 device: torch.device) -> None:
        self.head = head
        self.target_runner = target_runner
        # the head's cache is in the model's dtype on every rank, as on rank 0 (MtpProposer)
        self.runner = attach_head(head, target_runner, head_kv_spec(head, settings.block_size, settings.dtype),
                                  num_blocks, device, max_num_batched_tokens=settings.max_num_batched_tokens,
                                  max_num_seqs=settings.max_num_seqs, max_model_len=settings.max_model_len)
        self.hidden_size = int(head.fc.full_out_features)
        self.device, self.dtype = device, settings.dtype

    def run(self, mtp_pass: MtpPass) -> None:
        """The same pass as rank 0, on this rank's shard."""
        if mtp_pass.step_rows is not None:
            step_hidden = self.target_runner.step_hidden
            assert step_hidden is not None, "the target step's hidden states were not kept"
            hidden = step_rows_hidden(step_hidden, mtp_pass.step_rows)
        else:
            hidden = broadcast_tensor(torch.empty((mtp_pass.num_rows, self.hidden_size), dtype=self.dtype,
                                                  device=self.device))
        self.head.target_hidden = hidden
        try:
            self.runner.execute(mtp_pass.items, mtp_pass.tables,  # type: ignore[arg-type]
                                keep_rows=mtp_pass.keep_rows or None)
        finally:
            self.head.target_hidden = None
