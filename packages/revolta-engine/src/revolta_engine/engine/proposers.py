"""Which draft proposer a speculative config needs, loaded before the target's cache is planned."""

from __future__ import annotations

from typing import Any

from revolta_engine.engine.draft_model import DraftModel, load_draft_model
from revolta_engine.engine.mtp_proposer import MtpProposer, load_mtp_proposer


def load_proposer(spec: Any, checkpoint: Any, target_vocab: int, settings: Any) -> DraftModel | MtpProposer | None:
    """A draft model (``draft_model``), the checkpoint's MTP head (``mtp``), or None (n-gram drafts need no model,
    or no speculation)."""
    return (load_draft_model(spec, target_vocab, settings)
            or load_mtp_proposer(spec, checkpoint, target_vocab, settings))
