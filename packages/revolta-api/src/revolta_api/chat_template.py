"""Render chat messages to a prompt with the model's chat template (in the HTTP process, off the step loop)."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Mapping
from typing import Any

from revolta_engine.engine.chat import render_chat
from revolta_engine.errors import InvalidRequestError

logger = logging.getLogger(__name__)


class ChatRenderer:
    """Applies a chat template (the model's own, or one given with ``--chat-template``) through the tokenizer.

    ``default_kwargs`` (``--default-chat-template-kwargs``) are template variables every request gets unless it
    sets them itself in ``chat_template_kwargs``, e.g. ``{"enable_thinking": false}`` for a Qwen3 server.
    A request's own ``chat_template`` is refused unless ``trust_request_template``
    (``--trust-request-chat-template``): a template is a program the server runs, so its operator opts in, as
    in vLLM.
    """

    def __init__(self, tokenizer: Any, default_template: str | None,
                 default_kwargs: Mapping[str, Any] | None = None, *, trust_request_template: bool = False) -> None:
        self.tokenizer = tokenizer
        self.default_template = default_template
        self.default_kwargs = dict(default_kwargs or {})
        self.trust_request_template = trust_request_template
        # Template variables may not shadow apply_chat_template's own parameters (tokenize, return_dict, ...).
        self._reserved = set(inspect.signature(tokenizer.apply_chat_template).parameters) if tokenizer else set()

    def render(self, messages: list[dict], *, add_generation_prompt: bool = True,
               continue_final_message: bool = False, chat_template: str | None = None,
               template_kwargs: dict | None = None, tools: list[dict] | None = None,
               documents: list[dict] | None = None) -> str:
        """The prompt text for ``messages``; raises ``InvalidRequestError`` for messages the template rejects.
        ``documents`` go to the template as ``documents`` (retrieval-augmented templates list them).

        Rendering is the engine's own (``render_chat``), so a served chat matches ``LLM.chat``.
        """
        if chat_template is not None and not self.trust_request_template:
            raise InvalidRequestError("this server does not run chat templates sent with a request; its operator can "
                                      "allow them with --trust-request-chat-template", param="chat_template")
        template = chat_template or self.default_template
        if continue_final_message and add_generation_prompt:
            raise InvalidRequestError("continue_final_message and add_generation_prompt cannot both be true",
                                      param="continue_final_message")
        if continue_final_message and messages[-1]["role"] != "assistant":
            raise InvalidRequestError("continue_final_message needs the last message to be the assistant's",
                                      param="continue_final_message")
        kwargs = {k: v for k, v in self.template_kwargs(template_kwargs).items() if k not in self._reserved}
        if documents is not None:
            kwargs["documents"] = documents
        rendered = render_chat(self.tokenizer, template, messages, add_generation_prompt=add_generation_prompt,
                               tools=tools, continue_final_message=continue_final_message, **kwargs)
        if not isinstance(rendered, str):
            raise InvalidRequestError("the chat template did not produce text", param="chat_template")
        return rendered

    def template_kwargs(self, requested: Mapping[str, Any] | None) -> dict[str, Any]:
        """The server's default template variables with the request's own over them."""
        return {**self.default_kwargs, **(requested or {})}

    def thinking(self, requested: Mapping[str, Any] | None) -> bool | None:
        """``enable_thinking`` as the template will see it (None: neither the request nor the server sets it)."""
        value = self.template_kwargs(requested).get("enable_thinking")
        return None if value is None else bool(value)

