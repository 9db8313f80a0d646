"""Anthropic's error shape ``{"type": "error", "error": {"type", "message"}}``, as a response and as an SSE event."""

from __future__ import annotations

import msgspec
from fastapi.responses import Response

from revolta_api.errors import ApiError, ApiFamily

# Anthropic's error vocabulary, by HTTP status.
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
    529: "overloaded_error",
}


def anthropic_error_type(error: ApiError) -> str:
    """The Anthropic error type for ``error`` (by status; other 4xx are invalid requests, other 5xx api errors)."""
    if error.status in ERROR_TYPES:
        return ERROR_TYPES[error.status]
    if error.kind == "overloaded":
        return "overloaded_error"
    return "api_error" if error.status >= 500 else "invalid_request_error"


def anthropic_error_body(error: ApiError) -> dict:
    """The JSON body Anthropic sends for ``error``."""
    return {"type": "error", "error": {"type": anthropic_error_type(error), "message": error.message}}


def anthropic_error_response(error: ApiError) -> Response:
    """A JSON response in Anthropic's error shape with the error's status."""
    return Response(msgspec.json.encode(anthropic_error_body(error)), status_code=error.status,
                    media_type="application/json")


def anthropic_error_event(error: ApiError) -> bytes:
    """The SSE ``error`` event for an error after streaming began (Anthropic ends the stream there)."""
    return b"event: error\ndata: " + msgspec.json.encode(anthropic_error_body(error)) + b"\n\n"


ANTHROPIC_FAMILY = ApiFamily(name="anthropic", path_prefixes=("/v1/messages",),
                             error_response=anthropic_error_response, error_event=anthropic_error_event)
