"""OpenAI's Responses API (``/v1/responses``) over the chat pipeline: the router is
:mod:`revolta_api.responses.router`."""
