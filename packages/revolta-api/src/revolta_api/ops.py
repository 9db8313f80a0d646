"""Operational endpoints: ``/health`` (and ``/ping``), ``/version``, ``/metrics`` (open even when an API key is set)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from revolta_api.state import get_state

router = APIRouter()


def revolta_version() -> str:
    """The installed ReVolta API version."""
    try:
        return version("revolta-api")
    except PackageNotFoundError:  # running from a source tree without metadata
        return "0+unknown"


@router.get("/health")
@router.api_route("/ping", methods=["GET", "POST"])
async def health(request: Request) -> Response:
    """200 while the engine runs, 503 once it has died (``/ping``: the same, as vLLM answers SageMaker's probe)."""
    healthy = get_state(request).client.is_healthy
    return Response(status_code=200 if healthy else 503)


@router.get("/version")
async def get_version() -> dict:
    """The server's version."""
    return {"version": revolta_version()}


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    """Prometheus text exposition of the engine and request metrics."""
    registry = get_state(request).metrics.registry
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
