"""Incremental detokenization that never emits a broken UTF-8 character."""

from __future__ import annotations

from transformers import PreTrainedTokenizerBase

# How many tokens before the read offset are re-decoded for context (spaces, merges).
_PREFIX_WINDOW = 6


class IncrementalDetokenizer:
    """Turns a growing list of output token ids into text, a piece at a time.

    Each new piece is the difference between decoding a small window with and without the new tokens,
    so tokenizers that drop a leading space at the start of a decode still produce the right text. Text
    that ends in an incomplete UTF-8 sequence (U+FFFD) is held back until the next token completes it.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, prompt_ids: list[int], skip_special_tokens: bool,
                 spaces_between_special_tokens: bool = True) -> None:
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.spaces_between_special_tokens = spaces_between_special_tokens
        # Start with a little prompt context so the first output token decodes as it would mid-text.
        self.ids: list[int] = list(prompt_ids[-_PREFIX_WINDOW:])
        self.prefix_offset = 0
        self.read_offset = len(self.ids)
        self.text = ""

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(  # type: ignore[return-value]
            ids, skip_special_tokens=self.skip_special_tokens,
            spaces_between_special_tokens=self.spaces_between_special_tokens,
            clean_up_tokenization_spaces=False,
        )

    def add(self, token_id: int) -> str:
        """Add one token; return the newly completed text (possibly empty)."""
        self.ids.append(token_id)
        prefix_text = self._decode(self.ids[self.prefix_offset:self.read_offset])
        full_text = self._decode(self.ids[self.prefix_offset:])
        if len(full_text) <= len(prefix_text) or full_text.endswith("\ufffd"):
            return ""
        new = full_text[len(prefix_text):]
        self.prefix_offset = self.read_offset
        self.read_offset = len(self.ids)
        self.text += new
        return new
