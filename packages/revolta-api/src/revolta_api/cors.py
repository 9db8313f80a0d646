"""Cross-origin access for browser clients (vLLM's ``--allowed-origins`` and its neighbours, same defaults)."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware


@dataclass(frozen=True)
class CorsSettings:
    """Which web pages may call the API from a browser. vLLM's defaults: any origin, method and header, no
    credentials (cookies or HTTP auth); an API key in the ``Authorization`` header still works."""

    allowed_origins: tuple[str, ...] = ("*",)
    allow_credentials: bool = False
    allowed_methods: tuple[str, ...] = ("*",)
    allowed_headers: tuple[str, ...] = ("*",)


def install_cors(app: FastAPI, settings: CorsSettings) -> None:
    """Answer preflight requests and add the CORS headers; installed last, so it wraps the API-key check and even
    a 401 reaches the page that asked."""
    app.add_middleware(CORSMiddleware, allow_origins=list(settings.allowed_origins),
                       allow_credentials=settings.allow_credentials, allow_methods=list(settings.allowed_methods),
                       allow_headers=list(settings.allowed_headers))
