"""vLLM's ``bad_words``: token sequences that are never generated.

Each word is tokenized as it would appear at the start of the text and, where that gives other tokens, after a
space (in the middle of text). A one-token word is always blocked; a longer one blocks its last token whenever
the tokens generated so far end with the rest of it, so the whole sequence never appears in the output.
"""

from __future__ import annotations

from typing import Any

from revolta_engine.errors import InvalidRequestError


def bad_words_token_ids(tokenizer: Any, words: list[str] | None) -> list[list[int]]:
    """The token sequences of ``words`` (without and with a leading space); InvalidRequestError without a
    tokenizer."""
    if not words:
        return []
    if tokenizer is None:
        raise InvalidRequestError("bad_words needs the model's tokenizer (skip_tokenizer_init is set)",
                                  param="bad_words")
    sequences: list[list[int]] = []
    for word in words:
        plain = list(tokenizer.encode(word.lstrip(), add_special_tokens=False))
        spaced = list(tokenizer.encode(" " + word.lstrip(), add_special_tokens=False))
        for ids in (plain, spaced):
            if ids and ids not in sequences:
                sequences.append(ids)
    return sequences


def banned_next_tokens(sequences: list[list[int]], output_ids: list[int]) -> list[int]:
    """The tokens that would complete one of ``sequences`` after ``output_ids``."""
    banned = []
    for seq in sequences:
        prefix = seq[:-1]
        if not prefix or (len(output_ids) >= len(prefix) and output_ids[len(output_ids) - len(prefix):] == prefix):
            banned.append(seq[-1])
    return banned
