"""Errors of the HTTP layer and how each API family (OpenAI now, Anthropic later) shapes them.

Handlers raise :class:`ApiError` (or let an engine error through); the app turns it into the response
shape of the API the request path belongs to, through the error function registered for that path prefix.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from fastapi.responses import Response

from revolta_api.engine_client import EngineDeadError
from revolta_engine.errors import InvalidRequestError, RevoltaError

logger = logging.getLogger(__name__)


class ApiError(Exception):
    """An error answered to the client: HTTP status, message, and the OpenAI-style type/param/code slots.

    ``kind`` is API-neutral ("invalid_request", "authentication", "not_found", "overloaded", "server");
    each API's error function maps it to its own vocabulary.
    """

    def __init__(self, status: int, message: str, kind: str = "invalid_request", param: str | None = None,
                 code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind
        self.param = param
        self.code = code


def bad_request(message: str, param: str | None = None) -> ApiError:
    """400 for an invalid parameter."""
    return ApiError(400, message, "invalid_request", param=param)


def to_api_error(exc: BaseException) -> ApiError:
    """Map any exception to the :class:`ApiError` to answer; unexpected ones are logged as bugs (500)."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, InvalidRequestError):
        return ApiError(400, str(exc), "invalid_request", param=getattr(exc, "param", None))
    if isinstance(exc, EngineDeadError):
        return ApiError(503, str(exc), "overloaded", code="engine_dead")
    if isinstance(exc, RevoltaError):
        return ApiError(400, str(exc), "invalid_request")
    logger.error("Internal error while serving a request", exc_info=exc)
    return ApiError(500, f"Internal server error: {type(exc).__name__}: {exc}", "server")


ErrorResponder = Callable[[ApiError], Response]
ErrorEventFormatter = Callable[[ApiError], bytes]


@dataclass(frozen=True)
class ApiFamily:
    """One HTTP API served by the app: its path prefixes and how it shapes errors (plain and inside a stream)."""

    name: str
    path_prefixes: tuple[str, ...]
    error_response: ErrorResponder
    error_event: ErrorEventFormatter


def family_for_path(families: list[ApiFamily], path: str) -> ApiFamily:
    """The family whose longest prefix matches ``path`` (the first family is the default)."""
    best, best_len = families[0], -1
    for family in families:
        for prefix in family.path_prefixes:
            if path.startswith(prefix) and len(prefix) > best_len:
                best, best_len = family, len(prefix)
    return best
