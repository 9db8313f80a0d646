"""OpenAI's error shape: ``{"error": {"message", "type", "param", "code"}}``, as a response and as an SSE event."""

from __future__ import annotations

import msgspec
from fastapi.responses import Response

from revolta_api.errors import ApiError, ApiFamily

_TYPES = {
    "invalid_request": "invalid_request_error",
    "authentication": "invalid_request_error",
    "not_found": "invalid_request_error",
    "overloaded": "server_error",
    "server": "server_error",
}
_CODES = {"authentication": "invalid_api_key", "not_found": "model_not_found"}


def openai_error_body(error: ApiError) -> dict:
    """The JSON body OpenAI sends for ``error``."""
    return {"error": {"message": error.message, "type": _TYPES.get(error.kind, "invalid_request_error"),
                      "param": error.param, "code": error.code or _CODES.get(error.kind)}}


def openai_error_response(error: ApiError) -> Response:
    """A JSON response in OpenAI's error shape with the error's status."""
    return Response(msgspec.json.encode(openai_error_body(error)), status_code=error.status,
                    media_type="application/json")


def openai_error_event(error: ApiError) -> bytes:
    """The SSE event for an error after streaming began (the stream then ends with ``[DONE]``)."""
    return b"data: " + msgspec.json.encode(openai_error_body(error)) + b"\n\n"


OPENAI_FAMILY = ApiFamily(name="openai", path_prefixes=("/",), error_response=openai_error_response,
                          error_event=openai_error_event)
