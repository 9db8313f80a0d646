"""Anthropic's Messages API: ``/v1/messages`` (streaming and not) and ``/v1/messages/count_tokens``."""

from __future__ import annotations

from revolta_api.anthropic.errors import ANTHROPIC_FAMILY
from revolta_api.anthropic.messages import router

__all__ = ["ANTHROPIC_FAMILY", "router"]
