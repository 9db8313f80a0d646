"""Speculative decoding: proposers of draft tokens behind one interface, and one way of verifying their drafts.

- :mod:`.base`: the :class:`Proposer` interface every proposer implements
- :mod:`.ngram`: drafts looked up in the request's own tokens
- :mod:`.draft_model`: a smaller model of the same vocabulary proposes
- :mod:`.mtp`: the checkpoint's multi-token-prediction head proposes; :mod:`.mtp_head` sets up its cache and
  runner, :mod:`.mtp_parallel` runs its shards under tensor parallelism
- :mod:`.verify`: keeping the drafts the target's samples agree with, and which requests get drafts
- :mod:`.setup`: the speculative config, the proposer it needs, and each request's drafts for its next step
"""

from revolta_engine.config.speculative import (
    MAX_SPECULATIVE_TOKENS,
    SpeculativeConfig,
    parse_speculative_config,
)
from revolta_engine.spec_decode.base import Proposer
from revolta_engine.spec_decode.draft_model import DraftModel, load_draft_model
from revolta_engine.spec_decode.mtp import MtpProposer, build_mtp_head, load_mtp_proposer
from revolta_engine.spec_decode.ngram import NgramProposer, propose_ngram
from revolta_engine.spec_decode.setup import load_proposer, next_drafts
from revolta_engine.spec_decode.verify import accepted_tokens, draft_state_snapshots, wants_drafts

__all__ = [
    "MAX_SPECULATIVE_TOKENS",
    "DraftModel",
    "MtpProposer",
    "NgramProposer",
    "Proposer",
    "SpeculativeConfig",
    "accepted_tokens",
    "build_mtp_head",
    "draft_state_snapshots",
    "load_draft_model",
    "load_mtp_proposer",
    "load_proposer",
    "next_drafts",
    "parse_speculative_config",
    "propose_ngram",
    "wants_drafts",
]
