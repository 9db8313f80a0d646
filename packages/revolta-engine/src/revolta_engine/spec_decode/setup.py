"""What a speculative config asks for: vLLM's ``speculative_config`` validated into a :class:`SpeculativeConfig`, the
proposer it needs, and each request's drafts for its next step.

Three methods: n-gram drafts (``{"method": "ngram", ...}``, :mod:`~revolta_engine.spec_decode.ngram`), a draft
model's (``{"model": PATH, ...}``, :mod:`~revolta_engine.spec_decode.draft_model`) or the checkpoint's MTP head's
(``{"method": "mtp", ...}``, :mod:`~revolta_engine.spec_decode.mtp`), all verified the same way
(:mod:`~revolta_engine.spec_decode.verify`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from revolta_engine.core.request import Request
from revolta_engine.errors import InvalidRequestError
from revolta_engine.spec_decode.base import Proposer, placeholder_drafts
from revolta_engine.spec_decode.draft_model import load_draft_model
from revolta_engine.spec_decode.mtp import load_mtp_proposer
from revolta_engine.spec_decode.ngram import NgramProposer

MAX_SPECULATIVE_TOKENS = 16


@dataclass(frozen=True)
class SpeculativeConfig:
    """Resolved speculation settings: ``method`` "ngram" (lookup settings used), "draft_model" (``model``) or
    "mtp" (the target checkpoint's multi-token-prediction head)."""

    num_speculative_tokens: int
    prompt_lookup_max: int
    prompt_lookup_min: int
    method: str = "ngram"
    model: str | None = None


def parse_speculative_config(raw: dict[str, Any] | None) -> SpeculativeConfig | None:
    """Validate vLLM's ``speculative_config`` dict: ``{"method": "ngram", ...}``, ``{"model": PATH, ...}``
    (``method`` "draft_model", implied by ``model``) or ``{"method": "mtp", ...}`` (also vLLM's older
    "qwen3_next_mtp")."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise InvalidRequestError("speculative_config must be a JSON object", param="speculative_config")
    known = {"method", "model", "num_speculative_tokens", "prompt_lookup_max", "prompt_lookup_min"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise InvalidRequestError(f"speculative_config: unknown key(s) {', '.join(unknown)}; this engine knows "
                                  f"{', '.join(sorted(known))}", param="speculative_config")
    model = raw.get("model")
    method = raw.get("method", "draft_model" if model is not None else "ngram")
    method = "mtp" if method == "qwen3_next_mtp" else method
    if method not in ("ngram", "draft_model", "mtp"):
        raise InvalidRequestError(f"speculative_config.method {method!r} is not supported; use 'ngram' (draft "
                                  "tokens looked up in the prompt and output so far), 'draft_model' with 'model' "
                                  "(a smaller model of the same vocabulary) or 'mtp' (the checkpoint's own "
                                  "multi-token-prediction head)", param="speculative_config")
    if method == "draft_model" and (not isinstance(model, str) or not model):
        raise InvalidRequestError("speculative_config.method 'draft_model' needs 'model': the draft model's "
                                  "checkpoint", param="speculative_config")
    if method in ("ngram", "mtp") and model is not None:
        raise InvalidRequestError(f"speculative_config: 'model' belongs to the 'draft_model' method, not "
                                  f"{method!r}", param="speculative_config")
    k = raw.get("num_speculative_tokens")
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_SPECULATIVE_TOKENS:
        raise InvalidRequestError(f"speculative_config.num_speculative_tokens must be an integer from 1 to "
                                  f"{MAX_SPECULATIVE_TOKENS}, got {k!r}", param="speculative_config")
    hi = raw.get("prompt_lookup_max", 4)
    # Matches of a single token are mostly chance in free text (SmolLM2 on the CPU: 4% of their drafts accepted
    # and 18% slower, against 10% and 3% from two tokens up): two by default.
    lo = raw.get("prompt_lookup_min", min(2, hi) if isinstance(hi, int) else 2)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (hi, lo)) or not 1 <= lo <= hi <= 64:
        raise InvalidRequestError("speculative_config needs 1 <= prompt_lookup_min <= prompt_lookup_max <= 64, got "
                                  f"{lo!r} and {hi!r}", param="speculative_config")
    return SpeculativeConfig(k, hi, lo, method, model)


def load_proposer(spec: SpeculativeConfig | None, checkpoint: Any, target_vocab: int,
                  settings: Any) -> Proposer | None:
    """The proposer that runs a model: a draft model (``draft_model``), the checkpoint's MTP head (``mtp``), or None
    (n-gram drafts need no model, or no speculation); loaded before the target's cache is planned, so its weights
    are counted."""
    return (load_draft_model(spec, target_vocab, settings)
            or load_mtp_proposer(spec, checkpoint, target_vocab, settings))


def next_drafts(spec: SpeculativeConfig, request: Request, max_model_len: int, placeholders: bool) -> list[int]:
    """Draft tokens for the request's next step, within its max_tokens and the context length. ``placeholders``:
    a proposer that runs a model fills them once the step is scheduled (the scheduler makes room for as many);
    otherwise they are the n-gram lookup's."""
    room = min(spec.num_speculative_tokens, request.max_tokens - request.num_output_tokens - 1,
               max_model_len - request.num_tokens - 1)
    if placeholders:
        return placeholder_drafts(room)
    return NgramProposer(spec.prompt_lookup_max, spec.prompt_lookup_min).next_drafts(request, room)
