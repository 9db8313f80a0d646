"""The input embedding and LM head split over tensor-parallel ranks by vocabulary rows.

Each rank holds ``ceil(vocab / ranks)`` consecutive rows (the last rank's tail is zero padding). A lookup takes
the rows this rank holds, zeros for the others, and sums over the ranks; the head's logits are this rank's
columns, gathered on rank 0 (the one that samples) in rank order and cut back to the vocabulary.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from revolta_engine.layers.linear import dense_matmul
from revolta_engine.parallel.communication import tp_all_reduce, tp_gather_last
from revolta_engine.parallel.state import get_tp_layout


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


class VocabParallelHead:
    """The LM head of a causal-LM module whose ``model.embed_tokens`` is a :class:`VocabParallelEmbedding`: its own
    ``lm_head`` rows (or the tied embedding's), the logits of hidden states, and the head's checkpoint shard."""

    config: Any
    model: Any
    lm_head: nn.Parameter
    tie_word_embeddings: bool
    tp_size: int

    def init_lm_head(self, config: Any) -> None:
        """Create this rank's ``lm_head`` rows unless the config ties the head to the input embedding."""
        self.tie_word_embeddings = bool(getattr(config, "tie_word_embeddings", False))
        self.tp_size = get_tp_layout().size  # ranks the vocabulary is split over
        if not self.tie_word_embeddings:
            rows = config.vocab_size if self.tp_size == 1 else vocab_rows_per_rank(config.vocab_size)
            self.lm_head = nn.Parameter(torch.empty(rows, config.hidden_size), requires_grad=False)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits of the given hidden states, in float32 (the whole vocabulary on rank 0)."""
        weight = self.model.embed_tokens.weight if self.tie_word_embeddings else self.lm_head
        logits = dense_matmul(hidden, weight).float()  # the skinny fp16 GEMV at decode sizes on CUDA
        return gather_vocab_logits(logits, self.config.vocab_size, self.tp_size)

    def shard_checkpoint(self, param_name: str, tensor: torch.Tensor) -> torch.Tensor:
        """Tensor parallelism: this rank's vocabulary rows of the LM head."""
        return shard_vocab_rows(tensor, self.config.vocab_size) if param_name == "lm_head" else tensor
