"""A request's prompt as the engine takes it: text, token ids or vLLM's prompt dicts, checked before queuing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from revolta_engine.errors import InvalidRequestError, PromptTooLongError

PromptInput = str | list[int] | dict


def prompt_text_and_ids(prompt: PromptInput, tokenize: Callable[[str], list[int]]) -> tuple[str | None, list[int]]:
    """``(text or None, token ids)`` of a string, a list of ids or ``{"prompt"}`` / ``{"prompt_token_ids"}``."""
    if isinstance(prompt, dict):
        if "prompt_token_ids" in prompt:
            return prompt.get("prompt"), list(prompt["prompt_token_ids"])
        if "prompt" in prompt:
            prompt = prompt["prompt"]
        else:
            raise InvalidRequestError("a prompt dict needs 'prompt' or 'prompt_token_ids'", param="prompt")
    if isinstance(prompt, str):
        return prompt, tokenize(prompt)
    if isinstance(prompt, list | tuple) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        return None, list(prompt)
    raise InvalidRequestError("a prompt must be a string or a list of token ids", param="prompt")


def check_prompt_ids(ids: list[int], vocab: int, max_model_len: int, block_size: int, usable_blocks: int) -> None:
    """Reject a prompt the engine could never run: empty, unknown ids, too long, or larger than the KV cache."""
    if not ids:
        raise InvalidRequestError("the prompt is empty", param="prompt")
    if min(ids) < 0 or max(ids) >= vocab:
        bad = next(t for t in ids if not 0 <= t < vocab)
        raise InvalidRequestError(f"token id {bad} is outside the vocabulary (0..{vocab - 1})", param="prompt")
    if len(ids) >= max_model_len:
        raise PromptTooLongError(len(ids), max_model_len)
    need_blocks = -(-(len(ids) + 1) // block_size)
    if need_blocks > usable_blocks:
        raise InvalidRequestError(f"the prompt needs {need_blocks} KV blocks but the cache holds only {usable_blocks}",
                                  param="prompt")


def check_sampling_token_ids(allowed: list[int] | None, logit_bias: dict[int, float] | None, vocab: int) -> None:
    """``allowed_token_ids`` and ``logit_bias`` must name tokens of the vocabulary."""
    for param, ids in (("allowed_token_ids", allowed or []), ("logit_bias", list(logit_bias or {}))):
        bad = next((t for t in ids if not 0 <= t < vocab), None)
        if bad is not None:
            raise InvalidRequestError(f"{param}: token id {bad} is outside the vocabulary (0..{vocab - 1})",
                                      param=param)


def truncate_prompt(ids: list[int], keep: int | None, max_model_len: int) -> list[int]:
    """vLLM's ``truncate_prompt_tokens``: the prompt's last ``keep`` tokens (-1: the last ``max_model_len - 1``, room
    for one generated token); None keeps the prompt whole."""
    if keep is None:
        return ids
    if keep == 0 or keep < -1:
        raise InvalidRequestError(f"truncate_prompt_tokens must be -1 (as many as fit) or at least 1, got {keep}",
                                  param="truncate_prompt_tokens")
    keep = max_model_len - 1 if keep == -1 else keep
    return ids[-keep:] if len(ids) > keep else ids


def encode_prompt(tokenizer: Any, prompt: str, *, add_special_tokens: bool = True, param: str = "prompt"
                  ) -> list[int]:
    """Tokenize a text prompt, adding BOS (with ``add_special_tokens``) unless the text already starts with it.

    Text that is not valid Unicode (an unpaired UTF-16 surrogate such as ``"\ud800"``, which JSON can carry) is
    an ``InvalidRequestError`` naming ``param``, not a tokenizer crash.
    """
    if tokenizer is None:
        raise InvalidRequestError("this engine has no tokenizer (skip_tokenizer_init); send token ids", param=param)
    check_unicode(prompt, param)
    bos = tokenizer.bos_token
    add_special = add_special_tokens and not (bos and prompt.startswith(bos))
    return list(tokenizer.encode(prompt, add_special_tokens=add_special))


def check_unicode(text: str, param: str) -> None:
    """InvalidRequestError when ``text`` holds an unpaired surrogate (it cannot be UTF-8, so no tokenizer takes it)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InvalidRequestError(f"the text holds an unpaired UTF-16 surrogate (U+{ord(text[e.start]):04X} at "
                                  f"character {e.start}), which is not valid Unicode", param=param) from None


def prepare_prompt(prompt: PromptInput, params: Any, tokenize: Callable[[str], list[int]], max_model_len: int,
                   vocab: int, block_size: int, usable_blocks: int) -> tuple[str | None, list[int]]:
    """A request's prompt text (or None) and token ids, truncated as ``params`` ask and checked against the
    vocabulary, the context length and the KV cache; also checks the token ids ``params`` name."""
    text, ids = prompt_text_and_ids(prompt, tokenize)
    ids = truncate_prompt(ids, params.truncate_prompt_tokens, max_model_len)
    check_prompt_ids(ids, vocab, max_model_len, block_size, usable_blocks)
    check_sampling_token_ids(params.allowed_token_ids, params.logit_bias, vocab)
    return text, ids
