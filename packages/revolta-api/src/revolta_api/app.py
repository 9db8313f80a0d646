"""The FastAPI app factory: routers per API, auth, and errors shaped by the API each path belongs to."""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from revolta_api.anthropic import ANTHROPIC_FAMILY
from revolta_api.anthropic import router as anthropic_router
from revolta_api.chat_parsing import ChatParsing
from revolta_api.cors import CorsSettings, install_cors
from revolta_api.engine_client import EngineClient
from revolta_api.errors import ApiError, ApiFamily, family_for_path, to_api_error
from revolta_api.metrics import ServerMetrics
from revolta_api.openai import chat, completions, models, tokenize
from revolta_api.openai.errors import OPENAI_FAMILY
from revolta_api.ops import revolta_version
from revolta_api.ops import router as ops_router
from revolta_api.responses.router import router as responses_router
from revolta_api.state import ServerState, ServingOptions
from revolta_api.stats_log import log_stats_every
from revolta_engine.errors import RevoltaError

logger = logging.getLogger("revolta.api")

# Paths anyone may read even when --api-key is set (probes and scrapers carry no key).
OPEN_PATHS = frozenset({"/health", "/metrics", "/version", "/ping"})
OPENAI_ROUTERS: tuple[APIRouter, ...] = (chat.router, completions.router, models.router, tokenize.router,
                                         responses_router)
API_ROUTERS: tuple[APIRouter, ...] = (*OPENAI_ROUTERS, anthropic_router)


def build_app(client: EngineClient, *, served_model_name: str | Sequence[str] | None = None,
              api_key: str | None = None, chat_template: str | None = None,
              extra_routers: Sequence[APIRouter] = (), extra_families: Sequence[ApiFamily] = (),
              parsing: ChatParsing | None = None, cors: CorsSettings | None = CorsSettings(),
              options: ServingOptions | None = None, log_stats_interval: float | None = None) -> FastAPI:
    """Build the HTTP app over ``client``.

    ``served_model_name`` (one name or several aliases; default: the engine's) is what clients put in
    ``model``. ``api_key`` makes every path outside :data:`OPEN_PATHS` require ``Authorization: Bearer <key>``
    (or ``x-api-key``). ``extra_routers`` and ``extra_families`` add other APIs (e.g. Anthropic's) with
    their own error shapes. ``parsing`` names the tool-call and reasoning parsers run on chat outputs.
    ``cors`` lets browser pages call the API (default: any origin, as vLLM; None: no CORS headers).
    ``options``: server-wide request defaults (default chat template variables, forced usage chunks, logprob
    tokens as ids).
    ``log_stats_interval``: seconds between log lines of throughput and load (None: no such lines).
    The app starts the client on startup and shuts it down on shutdown.
    """
    families = [OPENAI_FAMILY, ANTHROPIC_FAMILY, *extra_families]

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await client.start()
        state: ServerState = app.state.revolta
        if not state.served_model_names:
            state.served_model_names = [client.info.served_model_name]
        state.metrics = ServerMetrics(state.model_name, client.stats, client.info.max_model_len)
        stats_task = (asyncio.create_task(log_stats_every(log_stats_interval, client.stats))
                      if log_stats_interval else None)
        try:
            yield
        finally:
            if stats_task is not None:
                stats_task.cancel()
            await state.responses.cancel_all()
            await client.shutdown()

    app = FastAPI(title="ReVolta", version=revolta_version(), lifespan=lifespan)
    names = [served_model_name] if isinstance(served_model_name, str) else list(served_model_name or [])
    app.state.revolta = ServerState(client=client, served_model_names=names, api_key=api_key,
                                    chat_template=chat_template, metrics=None,  # type: ignore[arg-type]
                                    families=families, options=options or ServingOptions())
    app.state.revolta_parsing = parsing or ChatParsing()
    for router in (ops_router, *API_ROUTERS, *extra_routers):
        app.include_router(router)
    _install_error_handlers(app, families)
    if api_key:
        _install_auth(app, api_key, families)
    if cors is not None:
        install_cors(app, cors)
    return app


def _install_error_handlers(app: FastAPI, families: list[ApiFamily]) -> None:
    def respond(request: Request, error: ApiError) -> Response:
        return family_for_path(families, request.url.path).error_response(error)

    @app.exception_handler(RequestValidationError)
    async def on_validation_error(request: Request, exc: RequestValidationError) -> Response:
        errors = exc.errors()
        first = errors[0] if errors else {}
        if first.get("type") == "json_invalid":  # its loc is the character position, not a field
            where_in_body = first.get("loc", ("body", "?"))[-1]
            return respond(request, ApiError(400, f"The request body is not valid JSON ({first.get('msg')} at "
                                                  f"character {where_in_body}).", "invalid_request"))
        loc = [str(part) for part in first.get("loc", ()) if part != "body"]
        where = ".".join(loc)
        if first.get("type") == "invalid_unicode":  # a whole-body check: its ctx names the field
            return respond(request, ApiError(400, first.get("msg", "invalid text"), "invalid_request",
                                             param=first["ctx"]["param"]))
        message = f"{where}: {first.get('msg', 'invalid value')}" if where else first.get("msg", "invalid body")
        if len(errors) > 1:
            message += f" (and {len(errors) - 1} more problem(s))"
        return respond(request, ApiError(400, message, "invalid_request", param=where or None))

    @app.exception_handler(StarletteHTTPException)
    async def on_http_error(request: Request, exc: StarletteHTTPException) -> Response:
        kind = {401: "authentication", 404: "not_found"}.get(exc.status_code,
                                                             "server" if exc.status_code >= 500 else
                                                             "invalid_request")
        error = ApiError(exc.status_code, str(exc.detail), kind)
        error.code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        return respond(request, error)

    @app.exception_handler(ApiError)
    async def on_api_error(request: Request, exc: ApiError) -> Response:
        return respond(request, exc)

    @app.exception_handler(RevoltaError)
    async def on_engine_error(request: Request, exc: RevoltaError) -> Response:
        return respond(request, to_api_error(exc))

    @app.exception_handler(Exception)
    async def on_error(request: Request, exc: Exception) -> Response:
        return respond(request, to_api_error(exc))


def _install_auth(app: FastAPI, api_key: str, families: list[ApiFamily]) -> None:
    expected = api_key.encode()

    @app.middleware("http")
    async def check_api_key(request: Request, call_next):  # type: ignore[no-untyped-def]
        if request.method == "OPTIONS" or request.url.path in OPEN_PATHS:
            return await call_next(request)
        header = request.headers.get("authorization", "")
        given = header[7:] if header[:7].lower() == "bearer " else request.headers.get("x-api-key", "")
        if not hmac.compare_digest(given.encode(), expected):
            error = ApiError(401, "Incorrect or missing API key: send it as 'Authorization: Bearer <key>'.",
                             "authentication")
            return family_for_path(families, request.url.path).error_response(error)
        return await call_next(request)
