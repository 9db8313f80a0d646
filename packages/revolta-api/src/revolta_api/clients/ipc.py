"""Messages between the HTTP process and the engine core process, encoded with msgspec (msgpack).

The engine's own dataclasses (``SamplingParams``, ``RequestOutput``) travel as they are: msgspec encodes and
decodes dataclasses natively, so nothing is copied field by field.
"""

from __future__ import annotations

import msgspec

from revolta_api.engine_client import EngineInfo, StatsSnapshot
from revolta_engine import errors as engine_errors
from revolta_engine.outputs import RequestOutput
from revolta_engine.sampling_params import SamplingParams


class ErrorInfo(msgspec.Struct):
    """An exception raised in the engine process, enough to raise the same typed error here."""

    kind: str
    message: str
    attributes: dict[str, str | int | None] = {}


# HTTP process -> engine core.
class AddRequest(msgspec.Struct, tag="add"):
    request_id: str
    prompt: str | list[int]
    params: SamplingParams
    priority: int = 0


class AbortRequests(msgspec.Struct, tag="abort"):
    request_ids: list[str]


class Shutdown(msgspec.Struct, tag="shutdown"):
    pass


# Engine core -> HTTP process.
class Ready(msgspec.Struct, tag="ready"):
    info: EngineInfo
    tokenizer: bytes  # pickled tokenizer: the HTTP process tokenizes and renders chat templates itself


class Outputs(msgspec.Struct, tag="outputs"):
    outputs: list[RequestOutput]
    stats: StatsSnapshot | None = None


class RequestFailed(msgspec.Struct, tag="failed"):
    request_id: str
    error: ErrorInfo


class EngineFailed(msgspec.Struct, tag="dead"):
    error: ErrorInfo


InputMessage = AddRequest | AbortRequests | Shutdown
OutputMessage = Ready | Outputs | RequestFailed | EngineFailed

_ERROR_ATTRIBUTES = ("param", "prompt_len", "max_model_len")


def error_info(exc: BaseException) -> ErrorInfo:
    """Describe ``exc`` for the other process."""
    attributes = {name: getattr(exc, name) for name in _ERROR_ATTRIBUTES if hasattr(exc, name)}
    return ErrorInfo(kind=type(exc).__name__, message=str(exc), attributes=attributes)


def rebuild_error(info: ErrorInfo) -> Exception:
    """Raise-ready exception of the same engine error class (RevoltaError when the class is not an engine one)."""
    found = getattr(engine_errors, info.kind, None)
    cls: type[engine_errors.RevoltaError] = engine_errors.RevoltaError
    if isinstance(found, type) and issubclass(found, engine_errors.RevoltaError):
        cls = found
    exc = Exception.__new__(cls)  # no __init__: the attributes are set below, as the class had them
    Exception.__init__(exc, info.message)
    for name, value in info.attributes.items():
        setattr(exc, name, value)
    if isinstance(exc, engine_errors.InvalidRequestError) and not hasattr(exc, "param"):
        exc.param = None
    return exc
