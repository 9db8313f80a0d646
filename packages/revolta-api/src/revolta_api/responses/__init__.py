"""OpenAI's Responses API (``POST /v1/responses``) over the chat pipeline."""

from revolta_api.responses.router import router

__all__ = ["router"]
