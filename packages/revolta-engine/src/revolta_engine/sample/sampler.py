"""The sampler: processes a batch of logits and draws one token per row.

Each row may carry its own ``torch.Generator`` (seeded requests), so a seeded request samples the same
tokens whatever else shares its batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from revolta_engine.sample.bad_words import banned_next_tokens
from revolta_engine.sample.penalties import apply_penalties
from revolta_engine.sampling_params import SamplingParams
from revolta_kernels import ops

if TYPE_CHECKING:
    from revolta_engine.sample.structured import GrammarMask, GrammarState


@dataclass
class SamplingRow:
    """Everything the sampler needs about one row of the batch."""

    params: SamplingParams
    prompt_ids: list[int]
    output_ids: list[int]
    generator: torch.Generator | None
    blocked_ids: list[int]  # EOS / stop ids masked while min_tokens is not reached, and bad_words' next tokens
    grammar: GrammarState | None = None  # structured output: tokens the grammar forbids are masked


def sampling_row(req: Any, generator: torch.Generator | None, eos_token_ids: set[int]) -> SamplingRow:
    """The row of a request whose next token is sampled now: EOS and stop ids are blocked until
    ``min_tokens`` (unless a complete grammar decides the end itself), and the tokens that would complete one of
    its ``bad_words``."""
    p = req.sampling_params
    blocked: list[int] = []
    if (req.num_output_tokens + req.num_pending_tokens < p.min_tokens
            and not (req.grammar is not None and req.grammar.can_end)):
        blocked = sorted((set() if p.ignore_eos else eos_token_ids) | set(p.stop_token_ids or []))
    if req.bad_words_ids:  # the output is on the host: bad_words keeps the loop synchronous
        blocked = sorted(set(blocked) | set(banned_next_tokens(req.bad_words_ids, req.output_token_ids)))
    return SamplingRow(p, req.prompt_token_ids, req.output_token_ids, generator, blocked, req.grammar)


@dataclass
class SamplerOutput:
    """Sampled tokens and, where asked, their logprobs."""

    token_ids: list[int]
    # per row: (sampled logprob, sampled rank, top-k ids, top-k logprobs) or None
    logprobs: list[tuple[float, int, list[int], list[float]] | None]


def _top_k_top_p_min_p(logits: torch.Tensor, rows: list[SamplingRow]) -> torch.Tensor:
    for i, row in enumerate(rows):
        p = row.params
        if p.top_k and p.top_k < logits.shape[1]:
            kth = torch.topk(logits[i], p.top_k).values[-1]
            logits[i] = logits[i].masked_fill(logits[i] < kth, float("-inf"))
        if p.min_p > 0.0:
            probs = torch.softmax(logits[i], dim=-1)
            logits[i] = logits[i].masked_fill(probs < p.min_p * probs.max(), float("-inf"))
        if p.top_p < 1.0:
            sorted_logits, idx = torch.sort(logits[i], descending=True)
            cum = torch.softmax(sorted_logits, dim=-1).cumsum(dim=-1)
            # Drop tokens once the mass before them already reaches top_p (always keep the first).
            drop = (cum - torch.softmax(sorted_logits, dim=-1)) >= p.top_p
            logits[i, idx[drop]] = float("-inf")
    return logits


def _compute_logprobs(raw: torch.Tensor, tokens: list[int], rows: list[SamplingRow]):
    wanted = [r.params.logprobs for r in rows]
    if all(w is None for w in wanted):
        return [None] * len(rows)
    logprobs = torch.log_softmax(raw, dim=-1)
    out: list[tuple[float, int, list[int], list[float]] | None] = []
    for i, k in enumerate(wanted):
        if k is None:
            out.append(None)
            continue
        tok = int(tokens[i])
        lp = logprobs[i, tok]
        rank = int((logprobs[i] > lp).sum()) + 1
        top = torch.topk(logprobs[i], k) if k > 0 else None
        out.append((float(lp), rank, top.indices.tolist() if top else [], top.values.tolist() if top else []))
    return out


def _device_tensor(data: list, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A small host list on ``device`` without making the host wait for the device (pinned source)."""
    t = torch.tensor(data, dtype=dtype)
    if device.type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


class Sampler:
    """Grammar masks, penalties, allowed/blocked tokens, temperature, top-k/top-p/min-p, then a greedy or
    random draw. The grammar mask is applied to the logits in place first, so logprobs describe the
    distribution the token was actually drawn from (as in vLLM)."""

    _grammar_mask: GrammarMask | None = None

    def __call__(self, logits: torch.Tensor, rows: list[SamplingRow]) -> SamplerOutput:
        tokens = self.sample(logits, rows)
        token_ids = tokens.tolist()
        return SamplerOutput(token_ids, self.logprobs(logits, token_ids, rows))

    @torch.inference_mode()  # the logits come from an inference-mode forward; grammar masks edit them in place
    def sample(self, logits: torch.Tensor, rows: list[SamplingRow]) -> torch.Tensor:
        """Token ids (int64, on the logits' device) of every row; waits for the device only for penalties
        and grammars. Grammar masks are applied to ``logits`` in place."""
        if any(r.grammar is not None for r in rows):
            if self._grammar_mask is None:
                from revolta_engine.sample.structured import GrammarMask

                self._grammar_mask = GrammarMask()
            self._grammar_mask(logits, rows)
        params = [r.params for r in rows]
        penalties = any(p.repetition_penalty != 1.0 or p.presence_penalty or p.frequency_penalty for p in params)
        masks = any(r.params.allowed_token_ids or r.blocked_ids or r.params.logit_bias for r in rows)
        if not penalties and not masks and all(p.greedy for p in params):
            return ops.argmax(logits)  # greedy fast path: nothing modifies the logits (one kernel on CUDA)
        logits = logits.clone()
        if penalties:
            apply_penalties(
                logits, [r.prompt_ids for r in rows], [r.output_ids for r in rows],
                [p.repetition_penalty for p in params], [p.presence_penalty for p in params],
                [p.frequency_penalty for p in params],
            )
        for i, row in enumerate(rows):
            if row.params.logit_bias:
                bias = row.params.logit_bias
                logits[i, _device_tensor(list(bias), torch.long, logits.device)] += _device_tensor(
                    list(bias.values()), logits.dtype, logits.device)
            if row.params.allowed_token_ids:
                mask = torch.full_like(logits[i], float("-inf"))
                mask[_device_tensor(row.params.allowed_token_ids, torch.long, logits.device)] = 0.0
                logits[i] += mask
            if row.blocked_ids:
                logits[i, _device_tensor(row.blocked_ids, torch.long, logits.device)] = float("-inf")
        tokens = ops.argmax(logits)
        random_rows = [i for i, p in enumerate(params) if not p.greedy]
        if random_rows:
            idx = _device_tensor(random_rows, torch.long, logits.device)
            temps = _device_tensor([params[i].temperature for i in random_rows], logits.dtype, logits.device)
            sub = _top_k_top_p_min_p(logits[idx] / temps.unsqueeze(1), [rows[i] for i in random_rows])
            probs = torch.softmax(sub, dim=-1)
            for j, i in enumerate(random_rows):
                # Exponential race: argmax(p / E) with E ~ Exp(1) draws from p, one generator per row.
                e = torch.empty_like(probs[j]).exponential_(generator=rows[i].generator)
                tokens[i] = (probs[j] / e).argmax()
        return tokens

    @torch.inference_mode()
    def logprobs(self, logits: torch.Tensor, token_ids: list[int],
                 rows: list[SamplingRow]) -> list[tuple[float, int, list[int], list[float]] | None]:
        """Logprobs (of the raw logits) of the sampled tokens for the rows that asked for them."""
        return _compute_logprobs(logits, token_ids, rows)
