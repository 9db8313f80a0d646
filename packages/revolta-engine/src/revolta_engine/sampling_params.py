"""Sampling parameters, with vLLM's names and validation."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

from revolta_engine.errors import InvalidRequestError
from revolta_engine.structured_outputs import StructuredOutputsParams


class RequestOutputKind(IntEnum):
    """How outputs are reported while a request runs (vLLM's names)."""

    CUMULATIVE = 0  # every output holds everything generated so far
    DELTA = 1  # every output holds only what is new since the last one
    FINAL_ONLY = 2  # one output when the request finishes


@dataclass
class SamplingParams:
    """How to sample one request's completions. Defaults follow vLLM (temperature 1.0, 16 tokens).

    ``temperature == 0`` means greedy. ``seed`` makes the request's samples reproducible whatever else
    runs in the same batch. ``stop`` strings end the output at the earliest match and are excluded unless
    ``include_stop_str_in_output``. ``ignore_eos`` keeps generating past EOS (EOS is not masked). ``structured_outputs`` constrains the output
    to a JSON schema, regex, choice or grammar (a token mask applied before sampling).
    """

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 or -1: disabled
    min_p: float = 0.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    seed: int | None = None
    max_tokens: int | None = 16
    min_tokens: int = 0
    stop: list[str] | str | None = None
    stop_token_ids: list[int] | None = None
    include_stop_str_in_output: bool = False
    ignore_eos: bool = False
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    allowed_token_ids: list[int] | None = None
    logit_bias: dict[int, float] | None = None  # token id -> added to its logit (OpenAI's range -100..100)
    bad_words: list[str] | None = None  # words whose tokens are never generated in that order (vLLM)
    truncate_prompt_tokens: int | None = None  # keep only the prompt's last k tokens (-1: as many as fit)
    output_kind: RequestOutputKind = RequestOutputKind.CUMULATIVE
    structured_outputs: StructuredOutputsParams | None = None
    extra_args: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        self.stop = list(self.stop or [])
        self.stop_token_ids = list(self.stop_token_ids or [])
        if self.top_k == -1:
            self.top_k = 0
        self.validate()

    def validate(self) -> None:
        """Raise :class:`InvalidRequestError` naming the first invalid field."""
        def bad(param: str, message: str) -> InvalidRequestError:
            return InvalidRequestError(f"{param} {message}", param=param)

        if not isinstance(self.n, int) or self.n < 1:
            raise bad("n", f"must be at least 1, got {self.n}")
        if self.temperature < 0:
            raise bad("temperature", f"must be non-negative, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise bad("top_p", f"must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise bad("top_k", f"must be -1 (disable) or at least 1, got {self.top_k}")
        if not 0.0 <= self.min_p <= 1.0:
            raise bad("min_p", f"must be in [0, 1], got {self.min_p}")
        if not -2.0 <= self.presence_penalty <= 2.0:
            raise bad("presence_penalty", f"must be in [-2, 2], got {self.presence_penalty}")
        if not -2.0 <= self.frequency_penalty <= 2.0:
            raise bad("frequency_penalty", f"must be in [-2, 2], got {self.frequency_penalty}")
        if self.repetition_penalty <= 0:
            raise bad("repetition_penalty", f"must be greater than zero, got {self.repetition_penalty}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise bad("max_tokens", f"must be at least 1, got {self.max_tokens}")
        if self.min_tokens < 0:
            raise bad("min_tokens", f"must be non-negative, got {self.min_tokens}")
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            raise bad("min_tokens", f"({self.min_tokens}) must not exceed max_tokens ({self.max_tokens})")
        if self.logprobs is not None and self.logprobs < 0:
            raise bad("logprobs", f"must be non-negative, got {self.logprobs}")
        if self.prompt_logprobs is not None and self.prompt_logprobs < 0:
            raise bad("prompt_logprobs", f"must be non-negative, got {self.prompt_logprobs}")
        if self.logit_bias is not None:
            if not isinstance(self.logit_bias, dict):
                raise bad("logit_bias", "must map token ids to biases")
            for token, value in self.logit_bias.items():
                if not isinstance(token, int) or isinstance(token, bool):
                    raise bad("logit_bias", f"keys must be token ids, got {token!r}")
                if not isinstance(value, int | float) or not -100.0 <= value <= 100.0:
                    raise bad("logit_bias", f"values must be numbers from -100 to 100, got {value!r} for {token}")
        if self.allowed_token_ids is not None and not self.allowed_token_ids:
            raise bad("allowed_token_ids", "must not be empty")
        if any(not s for s in self.stop):  # type: ignore[union-attr]
            raise bad("stop", "must not contain empty strings")
        if self.bad_words is not None and (not isinstance(self.bad_words, list)
                                           or not all(isinstance(w, str) and w.strip() for w in self.bad_words)):
            raise bad("bad_words", "must be a list of non-empty strings")
        k = self.truncate_prompt_tokens
        if k is not None and (not isinstance(k, int) or isinstance(k, bool) or not (k == -1 or k >= 1)):
            raise bad("truncate_prompt_tokens", f"must be -1 (as many as fit) or at least 1, got {k!r}")
        if self.seed is not None and not isinstance(self.seed, int):
            raise bad("seed", f"must be an integer, got {self.seed!r}")
        if self.structured_outputs is not None:
            if not isinstance(self.structured_outputs, StructuredOutputsParams):
                raise bad("structured_outputs", "must be a StructuredOutputsParams")
            self.structured_outputs.validate()

    def check_logprobs_limit(self, limit: int) -> None:
        """InvalidRequestError when more logprobs per token are asked than ``limit`` (the engine's
        ``max_logprobs``; -1: no limit)."""
        for param in ("logprobs", "prompt_logprobs"):
            asked = getattr(self, param)
            if limit >= 0 and asked is not None and asked > limit:
                raise InvalidRequestError(f"{param}: {asked} per token requested, but this engine returns at most "
                                          f"{limit} (its max_logprobs, vLLM's --max-logprobs)", param=param)

    @property
    def needs_host_tokens(self) -> bool:
        """Whether sampling reads the previously sampled tokens on the host (penalties, a grammar's next mask, bad
        words): such requests keep the engine's loop synchronous."""
        return bool(self.repetition_penalty != 1.0 or self.presence_penalty or self.frequency_penalty
                    or self.structured_outputs is not None or self.bad_words)

    @property
    def greedy(self) -> bool:
        """True when sampling reduces to argmax."""
        return self.temperature < 1e-5
