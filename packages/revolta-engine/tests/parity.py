"""Greedy parity with transformers, allowing divergence only at genuine ties."""

from __future__ import annotations

import torch

TIE_GAP = 0.02


@torch.inference_mode()
def reference_greedy(model, prompt_ids: list[int], max_new_tokens: int) -> list[int]:
    """transformers' own greedy decoding, ignoring EOS."""
    out = model.generate(torch.tensor([prompt_ids]), max_new_tokens=max_new_tokens,
                         min_new_tokens=max_new_tokens, do_sample=False, eos_token_id=None, pad_token_id=0)
    return out[0, len(prompt_ids):].tolist()


@torch.inference_mode()
def assert_greedy_parity(model, prompt_ids: list[int], ours: list[int], reference: list[int]) -> None:
    """Equal tokens, or a first difference where the reference's top-1/top-2 logit gap is a tie."""
    assert len(ours) == len(reference), (len(ours), len(reference))
    for step, (a, b) in enumerate(zip(ours, reference, strict=True)):
        if a == b:
            continue
        logits = model(torch.tensor([prompt_ids + reference[:step]])).logits[0, -1].double()
        top2 = torch.topk(logits, 2).values
        gap = float(top2[0] - top2[1])
        assert gap < TIE_GAP, (
            f"greedy tokens differ at step {step} (ours {a}, transformers {b}) although the reference's "
            f"top-1/top-2 logit gap is {gap:.4f} (>= {TIE_GAP}): a real bug, not a tie"
        )
        return
