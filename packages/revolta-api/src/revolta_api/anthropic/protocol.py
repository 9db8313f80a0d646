"""Request bodies of Anthropic's Messages API (pydantic), as the ``anthropic`` SDK sends them.

Unknown fields are kept (``extra="allow"``) so the handler can log them once and ignore them. Content blocks are
a union discriminated by ``type``: a block type this server does not know is a 400, not a silent drop.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from revolta_api.valid_unicode import valid_unicode_body


class AnthropicBaseModel(BaseModel):
    """Keeps unknown fields so they can be reported (and then ignored)."""

    model_config = ConfigDict(extra="allow")

    def unknown_fields(self) -> list[str]:
        """Names of the top-level fields the request carried that this server does not know."""
        return sorted(self.model_extra or {})


class TextBlock(AnthropicBaseModel):
    type: Literal["text"]
    text: str


class ImageBlock(AnthropicBaseModel):
    type: Literal["image"]
    source: dict[str, Any]


class DocumentBlock(AnthropicBaseModel):
    """A document: plain text (``source.type`` "text"), text blocks ("content"), or a PDF / URL / file this
    server cannot read."""

    type: Literal["document"]
    source: dict[str, Any]
    title: str | None = None
    context: str | None = None


class ToolUseBlock(AnthropicBaseModel):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any] = Field(default_factory=dict)


class ToolResultBlock(AnthropicBaseModel):
    type: Literal["tool_result"]
    tool_use_id: str
    content: str | list[Annotated[TextBlock | ImageBlock, Field(discriminator="type")]] | None = None
    is_error: bool | None = None


class ThinkingBlock(AnthropicBaseModel):
    type: Literal["thinking"]
    thinking: str
    signature: str | None = None


class RedactedThinkingBlock(AnthropicBaseModel):
    type: Literal["redacted_thinking"]
    data: str


ContentBlock = Annotated[
    TextBlock | ImageBlock | DocumentBlock | ToolUseBlock | ToolResultBlock | ThinkingBlock | RedactedThinkingBlock,
    Field(discriminator="type"),
]


class Message(AnthropicBaseModel):
    """One turn: the user's or the assistant's, as text or content blocks."""

    role: Literal["user", "assistant"]
    content: str | list[ContentBlock]


class Tool(AnthropicBaseModel):
    """A client tool the model may call; ``input_schema`` is a JSON schema of its input object."""

    name: str = Field(pattern=r"^[a-zA-Z0-9_-]{1,128}$")
    description: str | None = None
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})


class ToolChoice(AnthropicBaseModel):
    """auto (model decides), any (must call some tool), tool (must call ``name``), none (must not call)."""

    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class ThinkingConfig(AnthropicBaseModel):
    """Extended thinking on or off; ``budget_tokens`` is accepted (the model's own thinking is not capped)."""

    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: int | None = Field(None, ge=0)


class CountTokensRequest(AnthropicBaseModel):
    """Body of ``POST /v1/messages/count_tokens``: what shapes the prompt, nothing about sampling."""

    _valid_unicode = valid_unicode_body()

    model: str
    messages: list[Message] = Field(min_length=1)
    system: str | list[TextBlock] | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    thinking: ThinkingConfig | None = None


class MessagesRequest(CountTokensRequest):
    """Body of ``POST /v1/messages``."""

    max_tokens: int = Field(ge=1)
    stop_sequences: list[Annotated[str, Field(min_length=1)]] | None = None
    stream: bool = False
    temperature: float | None = Field(None, ge=0.0, le=1.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_k: int | None = Field(None, ge=0)
    metadata: dict[str, Any] | None = None
