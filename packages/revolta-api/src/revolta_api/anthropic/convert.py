"""Anthropic requests in the engine's terms: chat-template messages, tools, and sampling parameters."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from revolta_api.anthropic.protocol import (
    CountTokensRequest,
    DocumentBlock,
    MessagesRequest,
    TextBlock,
    ToolResultBlock,
)
from revolta_api.chat_parsing import ChatParsing
from revolta_api.errors import bad_request
from revolta_api.openai.chat_tools import ToolPlan
from revolta_api.structured import FORCED_TOOLS_PARSER, forced_tool_calls
from revolta_engine.engine.generation_defaults import apply_sampling_defaults
from revolta_engine.sampling_params import SamplingParams


def _text_of(blocks: str | list[Any] | None, param: str) -> str:
    if blocks is None:
        return ""
    if isinstance(blocks, str):
        return blocks
    parts = []
    for block in blocks:
        if not isinstance(block, TextBlock):
            raise bad_request(f"{param}: {block.type} blocks are not supported: this server reads text only.",
                              param=param)
        parts.append(block.text)
    return "".join(parts)


def _document_text(block: DocumentBlock, param: str) -> str:
    """A text document as the prompt shows it: its title and context (when given) above its text."""
    source = block.source
    kind = source.get("type")
    if kind == "text":
        text = source.get("data")
        if not isinstance(text, str):
            raise bad_request(f"{param}.source.data: a text document needs its text as a string.",
                              param=f"{param}.source.data")
    elif kind == "content":
        content = source.get("content")
        if isinstance(content, str):
            text = content
        elif isinstance(content, list) and all(isinstance(b, dict) and b.get("type") == "text"
                                               and isinstance(b.get("text"), str) for b in content):
            text = "\n\n".join(b["text"] for b in content)
        else:
            raise bad_request(f"{param}.source.content: this server reads documents of text blocks only.",
                              param=f"{param}.source.content")
    else:
        raise bad_request(f"{param}: {kind or 'untyped'} document sources are not supported: this server reads "
                          "text documents only (source type 'text' or 'content'); send a PDF's text instead.",
                          param=f"{param}.source.type")
    return "\n\n".join(part for part in (block.title, block.context, text) if part)


def _join_text(pieces: list[tuple[str, bool]]) -> str:
    """Text blocks run together as sent; a document is set apart from its neighbours by a blank line."""
    out = ""
    for i, (text, is_document) in enumerate(pieces):
        if i and (is_document or pieces[i - 1][1]):
            out += "\n\n"
        out += text
    return out


def _tool_result_text(block: ToolResultBlock, param: str) -> str:
    text = _text_of(block.content, param)
    return f"Error: {text}" if block.is_error and not text.startswith("Error") else text


def chat_messages(body: CountTokensRequest) -> list[dict[str, Any]]:
    """The conversation as chat-template messages (OpenAI/HF style: system, user, assistant, tool)."""
    out: list[dict[str, Any]] = []
    system = _text_of(body.system, "system")
    if system:
        out.append({"role": "system", "content": system})
    for i, message in enumerate(body.messages):
        param = f"messages.{i}.content"
        if isinstance(message.content, str):
            out.append({"role": message.role, "content": message.content})
            continue
        text: list[tuple[str, bool]] = []  # (text, whether it is a document)
        reasoning: list[str] = []
        calls: list[dict[str, Any]] = []
        for j, block in enumerate(message.content):
            where = f"{param}.{j}"
            if block.type == "text":
                text.append((block.text, False))
            elif block.type == "thinking" and message.role == "assistant":
                reasoning.append(block.thinking)
            elif block.type == "redacted_thinking" and message.role == "assistant":
                continue
            elif block.type == "tool_use" and message.role == "assistant":
                calls.append({"id": block.id, "type": "function",
                              "function": {"name": block.name, "arguments": block.input}})
            elif block.type == "tool_result" and message.role == "user":
                out.append({"role": "tool", "tool_call_id": block.tool_use_id,
                            "content": _tool_result_text(block, where)})
            elif block.type == "document" and message.role == "user":
                text.append((_document_text(block, where), True))
            elif block.type == "image":
                raise bad_request(f"{where}: image blocks are not supported: this server reads text only.",
                                  param=where)
            else:
                raise bad_request(f"{where}: a {block.type} block cannot appear in a {message.role} message.",
                                  param=where)
        if text or calls or reasoning or not out or out[-1]["role"] != "tool":
            turn: dict[str, Any] = {"role": message.role, "content": _join_text(text)}
            if calls:
                turn["tool_calls"] = calls
            if reasoning:
                turn["reasoning_content"] = "".join(reasoning)
            out.append(turn)
    return out


def chat_tools(body: CountTokensRequest, parsing: ChatParsing) -> ToolPlan:
    """Tools as chat templates expect them (OpenAI function format), the parser that reads their calls, and for
    tool_choice ``any``/``tool`` the constraint that forces the output to be calls (constrained decoding, in the
    format of the server's tool-call parser, Hermes when none is configured).

    400 for ``auto`` without a tool call parser (``--enable-auto-tool-choice --tool-call-parser``).
    """
    if not body.tools or (body.tool_choice is not None and body.tool_choice.type == "none"):
        return ToolPlan()
    tools = [{"type": "function", "function": {"name": t.name, "description": t.description or "",
                                               "parameters": t.input_schema}} for t in body.tools]
    choice = body.tool_choice
    if choice is not None and choice.type in ("any", "tool"):
        name = None
        if choice.type == "tool":
            names = {t.name for t in body.tools}
            if choice.name not in names:
                raise bad_request(f"tool_choice names the tool {choice.name!r}, which is not in tools "
                                  f"({', '.join(sorted(names))}).", param="tool_choice.name")
            name = choice.name
        parser = parsing.tool_call_parser or FORCED_TOOLS_PARSER
        return ToolPlan(tools, parser, forced_tool_calls(tools, parser=parser, name=name,
                                                         parallel=not choice.disable_parallel_tool_use))
    if not (parsing.enable_auto_tool_choice and parsing.tool_call_parser):
        raise bad_request("tools need the server started with --enable-auto-tool-choice and --tool-call-parser.",
                          param="tools")
    return ToolPlan(tools, parsing.tool_call_parser)


def thinking_kwargs(body: CountTokensRequest) -> dict[str, Any]:
    """The chat template variable for the request's ``thinking`` choice; empty when it leaves thinking unset
    (then the server's default template variables, else the model's template, decide)."""
    if body.thinking is None:
        return {}
    return {"enable_thinking": body.thinking.type != "disabled"}


def sampling_params(body: MessagesRequest, *, prompt_len: int, max_model_len: int, engine_stops: bool,
                    defaults: Mapping[str, Any] | None = None) -> SamplingParams:
    """Engine sampling parameters; ``max_tokens`` is capped to what fits after the prompt.

    Anthropic's ``max_tokens`` is required, and its clients send large values made for big contexts (Anthropic
    refuses only values above a model's output limit), so a small context caps it rather than refusing.
    ``defaults`` (the model's generation config, ``EngineInfo.default_sampling``) fill what the request leaves
    unset; its ``max_tokens`` caps the output too.

    ``engine_stops`` False leaves stop sequences to the API side (they must not match inside the thinking).
    """
    kwargs = apply_sampling_defaults({"temperature": body.temperature, "top_p": body.top_p, "top_k": body.top_k,
                                      "max_tokens": body.max_tokens}, defaults or {})
    limit = min(kwargs.pop("max_tokens"), max_model_len - prompt_len)
    return SamplingParams(max_tokens=limit, stop=list(body.stop_sequences or []) if engine_stops else None, **kwargs)
