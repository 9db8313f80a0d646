"""What a speculative config asks for: vLLM's ``speculative_config`` validated into a :class:`SpeculativeConfig`, the
proposer it needs, and each request's drafts for its next step.

Three methods: n-gram drafts (``{"method": "ngram", ...}``, :mod:`~revolta_engine.spec_decode.ngram`), a draft
model's (``{"model": PATH, ...}``, :mod:`~revolta_engine.spec_decode.draft_model`) or the checkpoint's MTP head's
(``{"method": "mtp", ...}``, :mod:`~revolta_engine.spec_decode.mtp`), all verified the same way
(:mod:`~revolta_engine.spec_decode.verify`).
"""

from __future__ import annotations

from typing import Any

from revolta_engine.config.speculative import SpeculativeConfig
from revolta_engine.core.request import Request
from revolta_engine.spec_decode.base import Proposer, placeholder_drafts
from revolta_engine.spec_decode.draft_model import load_draft_model
from revolta_engine.spec_decode.mtp import load_mtp_proposer
from revolta_engine.spec_decode.ngram import NgramProposer


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
