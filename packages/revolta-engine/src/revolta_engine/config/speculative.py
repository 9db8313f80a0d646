"""vLLM's ``speculative_config``, validated into a :class:`SpeculativeConfig`: n-gram drafts
(``{"method": "ngram", ...}``), a draft model's (``{"model": PATH, ...}``) or the checkpoint's MTP head's
(``{"method": "mtp", ...}``); the decoding itself is in :mod:`revolta_engine.spec_decode`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from revolta_engine.errors import InvalidRequestError

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
