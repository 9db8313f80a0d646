"""What every handler needs, held once per app: the engine client, the model names, the chat renderer, metrics."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from fastapi import Request

from revolta_api.chat_template import ChatRenderer
from revolta_api.engine_client import EngineClient
from revolta_api.errors import ApiError, ApiFamily
from revolta_api.metrics import ServerMetrics
from revolta_api.responses.store import ResponseStore

logger = logging.getLogger("revolta.api")


@dataclass(frozen=True)
class ServingOptions:
    """Server-wide request defaults from the command line (vLLM's flags of the same names)."""

    default_chat_template_kwargs: dict = field(default_factory=dict)  # template variables requests may override
    force_include_usage: bool = False  # every stream ends with a usage chunk, as if stream_options asked for it
    return_tokens_as_token_ids: bool = False  # logprob tokens as "token_id:N" unless the request says otherwise
    trust_request_chat_template: bool = False  # run a chat template a request sends (else a 400)


@dataclass
class ServerState:
    """Per-app state (``app.state.revolta``)."""

    client: EngineClient
    served_model_names: list[str]
    api_key: str | None
    chat_template: str | None
    metrics: ServerMetrics
    families: list[ApiFamily]
    options: ServingOptions = field(default_factory=ServingOptions)
    created: int = field(default_factory=lambda: int(time.time()))
    _renderer: ChatRenderer | None = None
    _warned_fields: set[tuple[str, str]] = field(default_factory=set)
    responses: ResponseStore = field(default_factory=ResponseStore)  # stored /v1/responses results

    @property
    def model_name(self) -> str:
        """The name responses report."""
        return self.served_model_names[0]

    @property
    def renderer(self) -> ChatRenderer:
        """Chat template renderer over the client's tokenizer (built once the client has started)."""
        if self._renderer is None:
            self._renderer = ChatRenderer(self.client.tokenizer, self.chat_template or self.client.info.chat_template,
                                          self.options.default_chat_template_kwargs,
                                          trust_request_template=self.options.trust_request_chat_template)
        return self._renderer

    def check_model(self, name: str | None) -> None:
        """404 unless ``name`` is empty or one of the served model names."""
        if name and name not in self.served_model_names:
            raise ApiError(404, f"The model `{name}` does not exist. This server serves "
                                f"{', '.join(repr(n) for n in self.served_model_names)}.",
                           "not_found", param="model")

    def note_unknown_fields(self, endpoint: str, names: list[str]) -> None:
        """Log, once per field name, that a request field is not supported and is ignored."""
        new = [n for n in names if (endpoint, n) not in self._warned_fields]
        if new:
            self._warned_fields.update((endpoint, n) for n in new)
            logger.warning("%s: ignoring unsupported request field(s): %s", endpoint, ", ".join(new))


def get_state(request: Request) -> ServerState:
    """The :class:`ServerState` of the app serving ``request``."""
    return request.app.state.revolta
