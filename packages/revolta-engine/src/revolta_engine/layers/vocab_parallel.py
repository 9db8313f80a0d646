"""The input embedding and LM head split over tensor-parallel ranks by vocabulary rows.

Each rank holds ``ceil(vocab / ranks)`` consecutive rows (the last rank's tail is zero padding). A lookup takes
the rows this rank holds, zeros for the others, and sums over the ranks; the head's logits are this rank's
columns, gathered on rank 0 (the one that samples) in rank order and cut back to the vocabulary.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from revolta_engine.distributed.communication import tp_all_reduce, tp_gather_last
from revolta_engine.distributed.parallel_state import get_tp_layout


def vocab_rows_per_rank(vocab_size: int) -> int:
    """Rows of the embedding (and head) each rank holds."""
    return -(-vocab_size // get_tp_layout().size)


def shard_vocab_rows(tensor: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """This rank's rows of a whole ``[vocab, hidden]`` checkpoint tensor, zero-padded past the vocabulary."""
    layout = get_tp_layout()
    if layout.size == 1:
        return tensor
    if tensor.shape[0] != vocab_size:
        raise ValueError(f"expected {vocab_size} vocabulary rows, got {tensor.shape[0]}")
    rows = vocab_rows_per_rank(vocab_size)
    start = layout.rank * rows
    part = tensor[start:start + rows]
    if part.shape[0] < rows:
        part = torch.cat([part, part.new_zeros(rows - part.shape[0], *part.shape[1:])])
    return part


class VocabParallelEmbedding(nn.Embedding):
    """``nn.Embedding`` over this rank's vocabulary rows (the whole table on one rank)."""

    def __init__(self, vocab_size: int, hidden_size: int) -> None:
        super().__init__(vocab_size if get_tp_layout().size == 1 else vocab_rows_per_rank(vocab_size), hidden_size)
        self.weight.requires_grad_(False)
        self.vocab_size = vocab_size
        self.tp_size = get_tp_layout().size
        self.vocab_start = get_tp_layout().rank * self.num_embeddings

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        if self.tp_size == 1:
            return super().forward(input_ids)
        local = input_ids - self.vocab_start
        outside = (local < 0) | (local >= self.num_embeddings)
        out = F.embedding(local.masked_fill(outside, 0), self.weight)
        out.masked_fill_(outside.unsqueeze(-1), 0)
        return tp_all_reduce(out)

    def shard_checkpoint(self, param_name: str, tensor: torch.Tensor) -> torch.Tensor:
        """This rank's rows of the checkpoint's embedding table."""
        return shard_vocab_rows(tensor, self.vocab_size)


def gather_vocab_logits(local_logits: torch.Tensor, vocab_size: int, tp_size: int) -> torch.Tensor:
    """The whole vocabulary's logits from every rank's columns, on rank 0 (identity on one rank; the other ranks
    get their own columns, which nothing reads)."""
    if tp_size == 1:
        return local_logits
    return tp_gather_last(local_logits)[..., :vocab_size]
