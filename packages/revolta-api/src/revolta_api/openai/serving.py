"""What chat and completions share: prompt checks, sampling parameters, logprob formatting, usage."""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping
from typing import Any

from revolta_api.errors import bad_request
from revolta_api.openai.protocol import SamplingFields
from revolta_api.structured import openai_structured_outputs
from revolta_engine.engine.generation_defaults import apply_sampling_defaults
from revolta_engine.errors import PromptTooLongError
from revolta_engine.outputs import PositionLogprobs
from revolta_engine.sampling_params import SamplingParams

_MIN_LOGPROB = -9999.0  # JSON has no -inf; vLLM clamps the same way


def random_id(prefix: str, requested: str | None = None) -> str:
    """A response id (``chatcmpl-...``, ``cmpl-...``); a client-given request_id is kept readable."""
    return f"{prefix}-{requested or uuid.uuid4().hex}"


def logprob_tokens_as_ids(body: Any, state: Any) -> bool:
    """vLLM's ``return_tokens_as_token_ids``: the request's choice, else the server's
    (``--return-tokens-as-token-ids``)."""
    asked = body.return_tokens_as_token_ids
    return bool(state.options.return_tokens_as_token_ids if asked is None else asked)


def check_logprobs_limit(limit: int, **asked: int | None) -> None:
    """400 naming the field that asks for more logprobs per token than the engine's max_logprobs (-1: no limit)."""
    for param, value in asked.items():
        if limit >= 0 and value is not None and value > limit:
            raise bad_request(f"{param} is {value}, but this server returns at most {limit} logprobs per token "
                              "(--max-logprobs).", param=param)


def check_prompt_ids(token_ids: list[int], max_model_len: int, vocab_size: int, param: str = "prompt") -> None:
    """400 for an empty prompt, token ids outside the vocabulary, or a prompt that leaves no room to generate."""
    if not token_ids:
        raise bad_request("The prompt is empty: it must have at least one token.", param=param)
    for tid in token_ids:
        if not 0 <= tid < vocab_size:
            raise bad_request(f"Token id {tid} is out of vocabulary (vocabulary size is {vocab_size}).",
                              param=param)
    if len(token_ids) >= max_model_len:
        raise PromptTooLongError(len(token_ids), max_model_len)


def sampling_params(req: SamplingFields, *, prompt_len: int, max_model_len: int, requested_max: int | None,
                    logprobs: int | None, prompt_logprobs: int | None = None, max_param: str | None = "max_tokens",
                    defaults: Mapping[str, Any] | None = None) -> SamplingParams:
    """Build the engine's ``SamplingParams``. Without a requested maximum the completion may fill the context.

    A requested maximum that does not fit after the prompt is a 400 naming ``max_param`` (vLLM's chat and
    completions servers do the same); ``max_param=None`` caps it to what fits instead (vLLM's Responses server).
    ``defaults`` (``EngineInfo.default_sampling``: the model's generation config) fill the sampling values the
    request leaves unset, and its ``max_tokens`` caps the output, as in vLLM.
    A structured output constraint (``response_format``, ``structured_outputs``, ``guided_*``) is carried along.
    """
    if req.prompt_logprobs is not None and req.stream:
        raise bad_request("prompt_logprobs is not available with stream=true.", param="prompt_logprobs")
    wanted = [k for k in (prompt_logprobs, req.prompt_logprobs) if k is not None]
    prompt_logprobs = max(wanted) if wanted else None
    room = max_model_len - prompt_len
    if requested_max is not None and requested_max > room and max_param is not None:
        raise bad_request(f"'{max_param}' is too large: {requested_max}. This model's maximum context length is "
                          f"{max_model_len} tokens and your request has {prompt_len} input tokens ({requested_max} > "
                          f"{max_model_len} - {prompt_len}).", param=max_param)
    given = {name: getattr(req, name) for name in ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")}
    kwargs = apply_sampling_defaults({**given, "max_tokens": requested_max}, defaults or {})
    max_tokens = min(room, kwargs.pop("max_tokens", room))
    extra: dict[str, Any] = {"cache_salt": req.cache_salt} if req.cache_salt else {}
    if req.min_tokens > max_tokens:
        raise bad_request(f"min_tokens ({req.min_tokens}) is more than the {max_tokens} tokens that can be "
                          f"generated here (max_tokens, or what fits after the {prompt_len}-token prompt "
                          f"in the {max_model_len}-token context).", param="min_tokens")
    return SamplingParams(
        logit_bias=logit_bias_ids(req.logit_bias), allowed_token_ids=req.allowed_token_ids,
        n=req.n, max_tokens=max_tokens, min_tokens=req.min_tokens, seed=req.seed, stop=req.stop,
        stop_token_ids=req.stop_token_ids, include_stop_str_in_output=req.include_stop_str_in_output,
        ignore_eos=req.ignore_eos, logprobs=logprobs, prompt_logprobs=prompt_logprobs,
        presence_penalty=req.presence_penalty or 0.0, frequency_penalty=req.frequency_penalty or 0.0,
        skip_special_tokens=req.skip_special_tokens, bad_words=req.bad_words,
        spaces_between_special_tokens=req.spaces_between_special_tokens, extra_args=extra,
        structured_outputs=openai_structured_outputs(req.structured_fields()), **kwargs)


def logit_bias_ids(raw: dict[str, float] | None) -> dict[int, float] | None:
    """OpenAI's ``logit_bias`` (token ids as JSON object keys) with integer keys; a key that is not a token id is
    a 400 (``SamplingParams`` checks the biases)."""
    if not raw:
        return None
    out: dict[int, float] = {}
    for key, value in raw.items():
        try:
            out[int(key)] = value
        except ValueError:
            raise bad_request(f"logit_bias keys must be token ids, got {key!r}.", param="logit_bias") from None
    return out


def clamp_logprob(value: float) -> float:
    """A JSON-safe logprob."""
    return _MIN_LOGPROB if math.isnan(value) or value < _MIN_LOGPROB else float(value)


def token_text(tokenizer: Any, token_id: int, decoded: str | None, as_id: bool = False) -> str:
    """The token's text as the engine decoded it, or decoded here; ``as_id``: ``token_id:{id}`` (vLLM's
    ``return_tokens_as_token_ids``, for tokens whose text is not whole UTF-8)."""
    if as_id:
        return f"token_id:{token_id}"
    if decoded is not None:
        return decoded
    return tokenizer.decode([token_id]) if tokenizer is not None else f"token_id:{token_id}"


def top_entries(position: PositionLogprobs, k: int) -> list[tuple[int, Any]]:
    """The ``k`` most likely (token id, Logprob) pairs of a position, by rank."""
    ranked = [(tid, lp, lp.rank) for tid, lp in position.items() if lp.rank is not None]
    ranked.sort(key=lambda item: item[2])
    return [(tid, lp) for tid, lp, _ in ranked[:k]]


def encode_prompt_logprobs(entries: list[PositionLogprobs | None] | None, prompt_ids: list[int],
                           k: int) -> list[dict[str, dict] | None] | None:
    """vLLM's ``prompt_logprobs`` field: per prompt token None (the first) or ``{token id: {logprob, rank,
    decoded_token}}`` with the token itself and the ``k`` most likely tokens."""
    if entries is None:
        return None
    out: list[dict[str, dict] | None] = []
    for token_id, position in zip(prompt_ids, entries, strict=True):
        if position is None:
            out.append(None)
            continue
        keep = [(token_id, position[token_id])] if token_id in position else []
        keep += [item for item in top_entries(position, k) if item[0] != token_id]
        out.append({str(tid): {"logprob": clamp_logprob(lp.logprob), "rank": lp.rank, "decoded_token": lp.decoded_token}
                    for tid, lp in keep})
    return out


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> dict:
    """OpenAI's usage object."""
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens}}


def stream_usage(body: Any, state: Any) -> tuple[bool, bool]:
    """(a usage chunk ends the stream, every chunk carries usage so far) from ``stream_options`` and the
    server's ``force_include_usage``."""
    options = body.stream_options
    include_usage = bool(options and options.include_usage) or state.options.force_include_usage
    return include_usage, include_usage and bool(options and options.continuous_usage_stats)
