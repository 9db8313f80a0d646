"""Split a thinking model's output into reasoning and content on the end-of-thinking token id.

The split happens on the token id (``</think>`` as one vocabulary entry), never on text, so a model that writes
the characters ``</think>`` while reasoning about tags does not end its thinking. Streaming and non-streaming
run the same code on the same deltas, so both report the same split.
"""

from __future__ import annotations

from typing import Any, Literal

from revolta_api.chat_output import OutputEvent
from revolta_engine.errors import InvalidRequestError

Mode = Literal["undecided", "reasoning", "content"]
_CLOSED_TAIL = 4  # "</think>" this close to the prompt's end closed the thinking before the output began


class ReasoningParser:
    """Base parser for ``<think> ... </think>`` models; subclasses say whether output starts in reasoning.

    ``thinking`` is the request's choice (``chat_template_kwargs.enable_thinking`` or Anthropic's ``thinking``):
    False means everything is content; None leaves it to the model and its template.
    """

    start_token = "<think>"
    end_token = "</think>"
    # True: output is reasoning from its first token (the template opened <think> in the prompt).
    starts_in_reasoning = False

    def __init__(self, tokenizer: Any, *, prompt_ids: list[int] | None = None, thinking: bool | None = None
                 ) -> None:
        vocab = tokenizer.get_vocab()
        self.start_id = vocab.get(self.start_token)
        self.end_id = vocab.get(self.end_token)
        if self.end_id is None:
            raise InvalidRequestError(f"the reasoning parser {type(self).__name__} needs the token "
                                      f"{self.end_token!r} in the model's vocabulary, which has none")
        self.tokenizer = tokenizer
        self.mode: Mode = self._initial_mode(list(prompt_ids or []), thinking)
        self._first = True
        self._strip_content = False

    def _initial_mode(self, prompt_ids: list[int], thinking: bool | None) -> Mode:
        if thinking is False:
            return "content"
        if self.end_id in prompt_ids[-_CLOSED_TAIL:]:
            return "content"  # the template closed an empty think block (Qwen3 with enable_thinking=False)
        if self.start_id is not None and self.start_id in prompt_ids:
            last_start = len(prompt_ids) - 1 - prompt_ids[::-1].index(self.start_id)
            last_end = (len(prompt_ids) - 1 - prompt_ids[::-1].index(self.end_id)) if self.end_id in prompt_ids \
                else -1
            if last_start > last_end:
                return "reasoning"  # the prompt opened a think block the output continues
        return "reasoning" if self.starts_in_reasoning else "undecided"

    @property
    def in_reasoning(self) -> bool:
        """True while the output is still thinking."""
        return self.mode == "reasoning"

    def feed(self, text: str, token_ids: list[int]) -> list[OutputEvent]:
        """Split one delta (its text and the token ids that made it) into reasoning and content events."""
        first, self._first = self._first, False
        if self.mode == "undecided" and token_ids:
            self.mode = "reasoning" if token_ids[0] == self.start_id else "content"
        if self.mode != "reasoning":
            return self._content(text)
        if first and token_ids and token_ids[0] == self.start_id:
            text = text.removeprefix(self.start_token)
            token_ids = token_ids[1:]
        if self.end_id not in token_ids:
            return [OutputEvent("reasoning", text)]
        k = token_ids.index(self.end_id)
        # The tag's text may also appear before the token (written as plain text): skip those occurrences.
        skip = self.tokenizer.decode(token_ids[:k]).count(self.end_token) if k else 0
        pos = -1
        for _ in range(skip + 1):
            pos = text.find(self.end_token, pos + 1)
            if pos < 0:
                break
        if pos >= 0:
            before, after = text[:pos], text[pos + len(self.end_token):]
        else:  # the end token is hidden (skip_special_tokens): the text after it is that of the later tokens
            tail = self.tokenizer.decode(token_ids[k + 1:]) if k + 1 < len(token_ids) else ""
            cut = len(text) - len(tail) if tail and text.endswith(tail) else len(text)
            before, after = text[:cut], text[cut:]
        self.mode = "content"
        self._strip_content = True
        return [OutputEvent("reasoning", before), *self._content(after)]

    def _content(self, text: str) -> list[OutputEvent]:
        if self._strip_content:
            # The template's separator after </think> is not part of the answer.
            text = text.lstrip("\n")
            if not text:
                return []
            self._strip_content = False
        return [OutputEvent("content", text)] if text else []


class Qwen3ReasoningParser(ReasoningParser):
    """Qwen3: thinking only when the output opens with ``<think>`` (or the prompt left one open)."""


class DeepSeekR1ReasoningParser(ReasoningParser):
    """DeepSeek-R1 (and Qwen3 thinking-only checkpoints): the template opens ``<think>``, so output starts
    in reasoning until ``</think>``; a leading ``<think>`` the model writes itself is dropped."""

    starts_in_reasoning = True
