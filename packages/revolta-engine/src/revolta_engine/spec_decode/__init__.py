"""Speculative decoding: proposers of draft tokens and the verification of drafts against the target."""
