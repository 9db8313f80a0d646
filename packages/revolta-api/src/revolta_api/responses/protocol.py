"""Body of ``POST /v1/responses`` and its translation into a chat completion request.

The conversation (``instructions`` + the stored conversation of ``previous_response_id`` + ``input`` items:
messages, earlier function calls and their outputs), function tools, ``tool_choice`` and ``text.format`` map onto
the chat pipeline's fields, so templates, tool-call parsing and constrained decoding are the chat endpoint's own.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, ValidationError

from revolta_api.errors import bad_request
from revolta_api.openai.protocol import ChatCompletionRequest, OpenAIBaseModel
from revolta_api.valid_unicode import valid_unicode_body

# vLLM's sampling extras a Responses request may carry as well
_PASSED_THROUGH = ("top_k", "min_p", "repetition_penalty", "seed", "stop", "frequency_penalty", "presence_penalty",
                   "bad_words", "priority", "ignore_eos", "min_tokens")


class ResponsesRequest(OpenAIBaseModel):
    """What this server reads of a Responses request (other fields are reported once and ignored)."""

    _valid_unicode = valid_unicode_body()

    model: str | None = None
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    stream: bool = False
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    text: dict[str, Any] | None = None
    previous_response_id: str | None = None
    store: bool | None = None
    metadata: dict[str, Any] | None = None
    user: str | None = None
    background: bool = False  # answer at once; the response generates on, for GET / cancel

    def unknown_fields(self) -> list[str]:
        return [name for name in super().unknown_fields() if name not in _PASSED_THROUGH]


def _text(content: Any, param: str) -> str:
    """A message's content as text: a string, or input_text / output_text parts."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad_request("message content must be a string or a list of text parts.", param=param)
    texts = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in ("input_text", "output_text", "text"):
            raise bad_request(f"content parts of type {kind!r} are not supported (text only).", param=param)
        texts.append(str(part.get("text", "")))
    return "".join(texts)


def _add_call(messages: list[dict[str, Any]], call_id: Any, name: Any, arguments: Any) -> None:
    """A function call as an assistant tool call; the calls of one turn (in a row) share one message."""
    call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments or "{}"}}
    last = messages[-1] if messages else None
    if last is not None and last["role"] == "assistant" and last.get("tool_calls") and not last["content"]:
        last["tool_calls"].append(call)  # parallel calls of one turn
    else:
        messages.append({"role": "assistant", "content": "", "tool_calls": [call]})


def input_messages(body: ResponsesRequest) -> list[dict[str, Any]]:
    """``input`` as chat messages (function calls as assistant tool calls, their outputs as tool messages)."""
    messages: list[dict[str, Any]] = []
    items = [{"role": "user", "content": body.input}] if isinstance(body.input, str) else body.input
    for i, item in enumerate(items):
        param = f"input[{i}]"
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                raise bad_request(f"message role must be user, assistant, system or developer, got {role!r}.",
                                  param=f"{param}.role")
            # templates know "system"; OpenAI's "developer" role is the same instruction slot
            messages.append({"role": "system" if role == "developer" else role,
                             "content": _text(item.get("content", ""), f"{param}.content")})
        elif kind == "function_call":
            _add_call(messages, item.get("call_id") or item.get("id"), item.get("name"), item.get("arguments"))
        elif kind == "function_call_output":
            output = item.get("output")
            messages.append({"role": "tool", "tool_call_id": item.get("call_id"),
                             "content": output if isinstance(output, str) else _text(output, f"{param}.output")})
        elif kind == "reasoning":
            continue  # earlier thinking is not sent back to the model
        else:
            raise bad_request(f"input items of type {kind!r} are not supported.", param=f"{param}.type")
    if not messages:
        raise bad_request("input must not be empty.", param="input")
    return messages


def output_messages(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A response's output items as the chat messages a later turn sends back (reasoning is dropped)."""
    messages: list[dict[str, Any]] = []
    for item in items:
        if item["type"] == "message":
            text = "".join(part.get("text", "") for part in item["content"])
            messages.append({"role": "assistant", "content": text})
        elif item["type"] == "function_call":
            _add_call(messages, item["call_id"], item["name"], item["arguments"])
    return messages


def _chat_tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    if tools is None:
        return None
    out = []
    for i, tool in enumerate(tools):
        if tool.get("type") != "function":
            raise bad_request(f"only function tools are supported, got {tool.get('type')!r}.", param=f"tools[{i}].type")
        function = {k: tool[k] for k in ("name", "description", "parameters", "strict") if k in tool}
        out.append({"type": "function", "function": function})
    return out


def _chat_tool_choice(choice: str | dict[str, Any] | None) -> str | dict[str, Any] | None:
    if isinstance(choice, dict):
        if choice.get("type") != "function" or not isinstance(choice.get("name"), str):
            raise bad_request("a named tool_choice is {\"type\": \"function\", \"name\": ...}.", param="tool_choice")
        return {"type": "function", "function": {"name": choice["name"]}}
    return choice


def _response_format(text: dict[str, Any] | None) -> dict[str, Any] | None:
    fmt = (text or {}).get("format")
    if fmt is None or fmt.get("type") == "text":
        return None
    if fmt.get("type") == "json_object":
        return {"type": "json_object"}
    if fmt.get("type") == "json_schema":
        return {"type": "json_schema", "json_schema": {k: fmt[k] for k in ("name", "schema", "strict") if k in fmt}}
    raise bad_request(f"text.format type {fmt.get('type')!r} is not supported (text, json_object, json_schema).",
                      param="text.format.type")


def to_chat_request(body: ResponsesRequest, conversation: list[dict[str, Any]]) -> ChatCompletionRequest:
    """The chat completion request that runs ``body`` over ``conversation`` (earlier turns and this input; the
    instructions go first); 400 naming the field for what cannot be mapped."""
    system = [{"role": "system", "content": body.instructions}] if body.instructions else []
    fields: dict[str, Any] = {
        "model": body.model, "messages": system + conversation, "max_completion_tokens": body.max_output_tokens,
        "temperature": body.temperature, "top_p": body.top_p, "tools": _chat_tools(body.tools),
        "tool_choice": _chat_tool_choice(body.tool_choice), "parallel_tool_calls": body.parallel_tool_calls,
        "response_format": _response_format(body.text),
    }
    fields.update({k: v for k, v in (body.model_extra or {}).items() if k in _PASSED_THROUGH})
    try:
        return ChatCompletionRequest.model_validate(fields)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(p) for p in error.get("loc", ()))
        raise bad_request(f"{where}: {error.get('msg')}", param=where or None) from None
