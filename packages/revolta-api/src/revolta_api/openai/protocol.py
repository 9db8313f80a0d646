"""Request bodies of the OpenAI-compatible endpoints (pydantic), with vLLM's extra sampling fields.

Unknown fields are kept (``extra="allow"``) so the handler can log them once and ignore them, as vLLM does.
Responses are built as plain dicts and encoded with msgspec: they sit on the per-token hot path.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from revolta_api.valid_unicode import valid_unicode_body

_INT64_MIN, _UINT64_MAX = -(2**63), 2**64 - 1
MAX_N = 128  # completions per request; more would hold the batch hostage

Seed = Annotated[int, Field(ge=_INT64_MIN, le=_UINT64_MAX)]
_INT32_MAX = 2**31 - 1
TokenId = Annotated[int, Field(ge=0, le=_INT32_MAX)]


class OpenAIBaseModel(BaseModel):
    """Keeps unknown fields so they can be reported (and then ignored)."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)

    def unknown_fields(self) -> list[str]:
        """Names of the fields the request carried that this server does not know."""
        return sorted(self.model_extra or {})


class StreamOptions(OpenAIBaseModel):
    include_usage: bool | None = False
    continuous_usage_stats: bool | None = False


class TextPart(OpenAIBaseModel):
    type: Literal["text"]
    text: str


class ChatMessage(OpenAIBaseModel):
    """One chat message; content is text or a list of text parts."""

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None

    @field_validator("content", mode="before")
    @classmethod
    def _text_parts_only(cls, value: Any) -> Any:
        # Said plainly, instead of pydantic's "Input should be a valid string" for every union member.
        if isinstance(value, list):
            kinds = sorted({str(p.get("type")) for p in value if isinstance(p, dict) and p.get("type") != "text"})
            if kinds:
                raise ValueError(f"content parts of type {', '.join(repr(k) for k in kinds)} are not supported: "
                                 "the models served here take text only (send 'text' parts)")
        return value

    def text(self) -> str:
        """The message's content as one string."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class SamplingFields(OpenAIBaseModel):
    """Sampling fields shared by chat and completions (OpenAI's and vLLM's extras)."""

    _valid_unicode = valid_unicode_body()

    model: str | None = None
    n: int = Field(1, ge=1, le=MAX_N)
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    stop: str | list[str] | None = None
    seed: Seed | None = None
    frequency_penalty: float | None = Field(0.0, ge=-2.0, le=2.0)
    presence_penalty: float | None = Field(0.0, ge=-2.0, le=2.0)
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    logit_bias: dict[str, float] | None = None  # token id (as a string) -> bias from -100 to 100
    # vLLM extras
    top_k: int | None = Field(None, ge=-1, le=_INT32_MAX)
    min_p: float | None = Field(None, ge=0.0, le=1.0)
    repetition_penalty: float | None = Field(None, gt=0.0)
    ignore_eos: bool = False
    min_tokens: int = Field(0, ge=0, le=_INT32_MAX)
    stop_token_ids: list[TokenId] | None = None
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    request_id: str | None = Field(None, max_length=256)
    prompt_logprobs: int | None = Field(None, ge=0)  # vLLM: every prompt token's logprob + top k
    allowed_token_ids: list[TokenId] | None = Field(None, min_length=1)  # vLLM: sample only among these
    bad_words: list[str] | None = None  # vLLM: words never generated
    priority: int = Field(0, ge=-_INT32_MAX, le=_INT32_MAX)  # vLLM: lower runs first (priority scheduling)
    truncate_prompt_tokens: int | None = Field(None, ge=-1, le=_INT32_MAX)  # vLLM: keep the prompt's last k tokens
    # vLLM: salts this request's prefix-cache (and KV offload) block hashes, so tenants never share blocks
    cache_salt: str | None = Field(None, min_length=1, max_length=1024)
    return_token_ids: bool | None = None  # vLLM: token ids beside the text (prompt_token_ids, token_ids)
    return_tokens_as_token_ids: bool | None = None  # vLLM: logprobs name each token "token_id:{id}"
    # structured output (read by revolta_api.structured): OpenAI's, vLLM's, and vLLM's older names
    response_format: dict[str, Any] | None = None
    structured_outputs: dict[str, Any] | None = None
    guided_json: dict[str, Any] | str | None = None
    guided_regex: str | None = None
    guided_choice: list[str] | None = None
    guided_grammar: str | None = None

    def structured_fields(self) -> dict[str, Any]:
        """The structured output fields the request set."""
        names = ("response_format", "structured_outputs", "guided_json", "guided_regex", "guided_choice",
                 "guided_grammar")
        return {name: getattr(self, name) for name in names if getattr(self, name) is not None}


class ChatCompletionRequest(SamplingFields):
    """Body of ``POST /v1/chat/completions``."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool | None = False
    top_logprobs: int | None = Field(None, ge=0)
    chat_template: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    echo: bool = False  # vLLM: the reply starts with the final assistant message it continues
    documents: list[dict[str, Any]] | None = None  # vLLM: handed to the chat template (RAG templates read them)


class CompletionRequest(SamplingFields):
    """Body of ``POST /v1/completions``: one prompt or a batch, as text or token ids."""

    prompt: str | list[TokenId] | list[str] | list[list[TokenId]]
    echo: bool | None = False
    logprobs: int | None = Field(None, ge=0)
    max_tokens: int | None = Field(16, ge=1)
    suffix: str | None = None
    add_special_tokens: bool = True


class TokenizeCompletionRequest(OpenAIBaseModel):
    """Body of ``POST /tokenize`` for a plain prompt."""

    _valid_unicode = valid_unicode_body()

    model: str | None = None
    prompt: str
    add_special_tokens: bool = True
    return_token_strs: bool = False


class TokenizeChatRequest(OpenAIBaseModel):
    """Body of ``POST /tokenize`` for chat messages (rendered with the chat template first)."""

    _valid_unicode = valid_unicode_body()

    model: str | None = None
    messages: list[ChatMessage] = Field(min_length=1)
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    chat_template: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    return_token_strs: bool = False


class DetokenizeRequest(OpenAIBaseModel):
    """Body of ``POST /detokenize``."""

    model: str | None = None
    tokens: list[TokenId]
