"""Chat template rendering with the tokenizer's jinja environment."""

from __future__ import annotations

from typing import Any, cast

from transformers import PreTrainedTokenizerBase

from revolta_engine.errors import InvalidRequestError

_ROLES = {"system", "user", "assistant", "tool", "developer"}


def render_chat(tokenizer: PreTrainedTokenizerBase | None, template: str | None, messages: list[dict], *,
                add_generation_prompt: bool = True, tools: list[dict] | None = None,
                **template_kwargs: Any) -> str:
    """Render chat ``messages`` into a prompt string; InvalidRequestError on malformed messages."""
    if tokenizer is None:
        raise InvalidRequestError("chat needs a tokenizer, but the engine runs without one", param="messages")
    if template is None:
        raise InvalidRequestError("the model has no chat template; pass chat_template", param="chat_template")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequestError("messages must be a non-empty list", param="messages")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in _ROLES:
            raise InvalidRequestError(f"messages[{i}] needs a role in {sorted(_ROLES)}", param="messages")
    try:
        rendered: Any = tokenizer.apply_chat_template(
            messages, chat_template=template, tools=cast(Any, tools), tokenize=False,
            add_generation_prompt=add_generation_prompt, **template_kwargs,
        )
        return str(rendered)
    except Exception as e:  # jinja raises many types (TemplateError, TypeError from the template's own code)
        raise InvalidRequestError(f"could not render the chat template: {e}", param="messages") from e
