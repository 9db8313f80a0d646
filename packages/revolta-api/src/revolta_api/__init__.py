"""revolta-api: the OpenAI-compatible HTTP server over an :class:`EngineClient`."""

from __future__ import annotations

from revolta_api.app import build_app
from revolta_api.engine_client import EngineClient, EngineDeadError, EngineInfo, StatsSnapshot

__all__ = ["EngineClient", "EngineDeadError", "EngineInfo", "StatsSnapshot", "build_app"]
