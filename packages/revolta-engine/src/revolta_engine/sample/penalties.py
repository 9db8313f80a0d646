"""Repetition, presence and frequency penalties (vLLM's semantics)."""

from __future__ import annotations

import torch


def apply_penalties(
    logits: torch.Tensor,
    prompt_ids: list[list[int]],
    output_ids: list[list[int]],
    repetition: list[float],
    presence: list[float],
    frequency: list[float],
) -> None:
    """Penalise logits in place, row by row.

    Repetition (HF/CTRL style) applies to tokens in the prompt or the output: positive logits are
    divided by the penalty and negative ones multiplied. Presence and frequency apply to output tokens
    only: ``logit -= presence * [count > 0] + frequency * count``.
    """
    vocab = logits.shape[1]
    for row in range(logits.shape[0]):
        rep, pres, freq = repetition[row], presence[row], frequency[row]
        if rep != 1.0:
            seen = torch.tensor(sorted(set(prompt_ids[row]) | set(output_ids[row])), dtype=torch.long)
            seen = seen[seen < vocab]
            vals = logits[row, seen]
            logits[row, seen] = torch.where(vals > 0, vals / rep, vals * rep)
        if (pres != 0.0 or freq != 0.0) and output_ids[row]:
            counts = torch.bincount(torch.tensor(output_ids[row], dtype=torch.long), minlength=vocab)[:vocab]
            counts = counts.to(logits.device, logits.dtype)
            logits[row] -= freq * counts + pres * (counts > 0).to(logits.dtype)
