"""Prompt logprobs (vLLM's ``prompt_logprobs``): the logprob of every prompt token given the tokens before it.

A request that asks for them computes its whole prompt (it takes no prefix-cache hits: cached positions have no
logits, see :meth:`KVCacheManager.find_cached_prefix`). The forward pass keeps the hidden states of its prompt
rows; the row of position ``p`` predicts prompt token ``p + 1``. Entry 0 of the result is None, as in vLLM:
nothing predicts the first token. With ``n > 1`` the first sequence's prefill provides them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

ROWS_PER_PASS = 256  # logits of this many rows at a time: a long prompt x a large vocabulary does not fit at once


@dataclass
class PromptRows:
    """The batch rows whose logits give prompt logprobs, and whom each row reports to."""

    rows: list[int] = field(default_factory=list)
    owners: list[tuple[Any, int]] = field(default_factory=list)  # (ParentRequestState, prompt position)


def plan_prompt_rows(scheduled: list, children: dict[str, tuple[Any, Any, Any]]) -> PromptRows | None:
    """The rows of this step's batch (in the runner's flattened order) that predict prompt tokens."""
    plan = PromptRows()
    off = 0
    for s in scheduled:
        req = s.request
        parent, state, _ = children[req.request_id]
        if parent.prompt_logprobs is not None and state.index == 0:
            start, end = req.num_computed_tokens, req.num_computed_tokens + s.num_new_tokens
            for p in range(start, min(end, req.num_prompt_tokens - 1)):
                plan.rows.append(off + p - start)
                plan.owners.append((parent, p + 1))
        off += s.num_new_tokens
    return plan if plan.rows else None


@torch.inference_mode()
def record_prompt_logprobs(hidden: torch.Tensor, plan: PromptRows,
                           compute_logits: Callable[[torch.Tensor], torch.Tensor]) -> None:
    """Logprobs of the planned rows' next prompt tokens (plus each request's top ``k``), into their parents."""
    k_max = max(parent.params.prompt_logprobs for parent, _ in plan.owners)
    for lo in range(0, len(plan.rows), ROWS_PER_PASS):
        owners = plan.owners[lo:lo + ROWS_PER_PASS]
        logprobs = torch.log_softmax(compute_logits(hidden[lo:lo + len(owners)]).float(), dim=-1)
        targets = torch.tensor([parent.prompt_token_ids[pos] for parent, pos in owners], device=logprobs.device)
        chosen = logprobs.gather(1, targets[:, None]).squeeze(1)
        ranks = (logprobs > chosen[:, None]).sum(dim=1) + 1
        top = torch.topk(logprobs, k_max, dim=1) if k_max > 0 else None
        chosen_l, ranks_l, targets_l = chosen.tolist(), ranks.tolist(), targets.tolist()
        top_ids = top.indices.tolist() if top is not None else [[] for _ in owners]
        top_lps = top.values.tolist() if top is not None else [[] for _ in owners]
        for j, (parent, pos) in enumerate(owners):
            k = parent.params.prompt_logprobs
            parent.set_prompt_logprob(pos, targets_l[j], chosen_l[j], ranks_l[j], top_ids[j][:k], top_lps[j][:k])
