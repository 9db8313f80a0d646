"""Tool calls and reasoning on ``/v1/chat/completions``: request checks, template messages, and per-choice
output (``reasoning`` / ``reasoning_content``, ``tool_calls``) built from the shared chat output parser."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from revolta_api.chat_output import ChatOutputParser, OutputEvent, fold_tool_calls
from revolta_api.chat_parsing import ChatParsing
from revolta_api.errors import bad_request
from revolta_api.structured import FORCED_TOOLS_PARSER, forced_tool_calls
from revolta_api.tool_parsers.arguments import arguments_object
from revolta_engine.outputs import CompletionOutput
from revolta_engine.structured_outputs import StructuredOutputsParams


@dataclass
class ToolPlan:
    """The tools a chat request offers, the parser that reads their calls, and (tool_choice required or
    named) the constraint that forces the output to be those calls."""

    tools: list[dict[str, Any]] | None = None
    parser: str | None = None
    forced: StructuredOutputsParams | None = None


def tool_names(tools: list[Any], param: str = "tools") -> list[str]:
    """The function names of OpenAI-format ``tools``; 400 for a tool without one."""
    names = []
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise bad_request(f"{param}[{i}] must be {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}.",
                              param=f"{param}[{i}]")
        names.append(function["name"])
    return names


def request_tools(body: Any, parsing: ChatParsing) -> ToolPlan:
    """How the request's tools are offered and read; 400 for a tool choice this server cannot honour.

    ``required`` and a named function are enforced by constrained decoding: the output is calls in the format
    of the server's tool-call parser (Hermes ``<tool_call>`` JSON when none is configured).
    """
    tools = getattr(body, "tools", None)
    choice = getattr(body, "tool_choice", None)
    if not tools or choice == "none":
        return ToolPlan()
    names = tool_names(tools)
    if choice == "required" or isinstance(choice, dict):
        name = None
        if isinstance(choice, dict):
            function = choice.get("function")
            if choice.get("type") != "function" or not isinstance(function, dict) \
                    or not isinstance(function.get("name"), str):
                raise bad_request("a named tool_choice is {\"type\": \"function\", \"function\": {\"name\": ...}}.",
                                  param="tool_choice")
            name = function["name"]
            if name not in names:
                raise bad_request(f"tool_choice names the function {name!r}, which is not in tools "
                                  f"({', '.join(names)}).", param="tool_choice.function.name")
        parser = parsing.tool_call_parser or FORCED_TOOLS_PARSER
        forced = forced_tool_calls(tools, parser=parser, name=name,
                                   parallel=getattr(body, "parallel_tool_calls", None) is not False)
        return ToolPlan(tools, parser, forced)
    if choice not in (None, "auto"):
        raise bad_request(f"tool_choice must be 'none', 'auto', 'required' or a named function, not {choice!r}.",
                          param="tool_choice")
    if not (parsing.enable_auto_tool_choice and parsing.tool_call_parser):
        raise bad_request("'auto' tool choice needs the server started with --enable-auto-tool-choice and "
                          "--tool-call-parser.", param="tools")
    return ToolPlan(tools, parsing.tool_call_parser)


def template_messages(body: Any) -> list[dict[str, Any]]:
    """Chat messages for the template, with assistant tool calls (arguments as objects) and tool results."""
    out = []
    for m in body.messages:
        message: dict[str, Any] = {"role": m.role, "content": m.text()}
        if m.name:
            message["name"] = m.name
        extra = m.model_extra or {}
        if extra.get("tool_calls"):
            message["tool_calls"] = [
                {**call, "function": {**call.get("function", {}),
                                      "arguments": arguments_object(call.get("function", {}).get("arguments"))
                                      if isinstance(call.get("function", {}).get("arguments"), str)
                                      else call.get("function", {}).get("arguments", {})}}
                for call in extra["tool_calls"] if isinstance(call, dict)]
        if extra.get("tool_call_id"):
            message["tool_call_id"] = extra["tool_call_id"]
        reasoning = extra.get("reasoning_content") or extra.get("reasoning")
        if reasoning:
            message["reasoning_content"] = reasoning
        out.append(message)
    return out


class ChoiceOutput:
    """One choice's parsed output: what to stream for each engine delta, and the final message."""

    def __init__(self, parser: ChatOutputParser, single_call: bool = False) -> None:
        self.parser = parser
        self.single_call = single_call  # parallel_tool_calls=false: the first call only
        self.events: list[OutputEvent] = []
        self.finish_reason: str | None = None
        self.stop_reason: Any = None

    @property
    def stopped(self) -> bool:
        """True once a content-side stop string ended this choice."""
        return self.parser.stopped_by is not None

    def feed(self, comp: CompletionOutput) -> dict[str, Any]:
        """The chat delta for one engine delta (``{}`` when there is nothing to send yet)."""
        if self.stopped:
            return {}
        events = self.parser.feed(comp.text, list(comp.token_ids))
        if self.stopped:
            self.finish_reason, self.stop_reason = "stop", self.parser.stopped_by
        elif comp.finish_reason is not None:
            events += self.parser.finish()
            self.finish_reason, self.stop_reason = comp.finish_reason, comp.stop_reason
        if self.single_call:
            events = [e for e in events if e.tool is None or e.tool.index == 0]
        self.events += events
        if self.finish_reason == "stop" and fold_tool_calls(self.events):
            self.finish_reason = "tool_calls"
        return _delta(events)

    def message(self) -> dict[str, Any]:
        """The final assistant message (content, reasoning, tool calls)."""
        delta = _delta(self.events)
        calls = fold_tool_calls(self.events)
        message: dict[str, Any] = {"role": "assistant", "content": delta.get("content") if (delta.get(
            "content") or not calls) else None}
        if "reasoning" in delta:
            message["reasoning"] = message["reasoning_content"] = delta["reasoning"]
        if calls:
            message["tool_calls"] = [{"id": c["id"], "type": "function",
                                      "function": {"name": c["name"], "arguments": c["arguments"]}}
                                     for c in calls]
        if message["content"] is None and not calls:
            message["content"] = ""
        return message


def _delta(events: list[OutputEvent]) -> dict[str, Any]:
    delta: dict[str, Any] = {}
    reasoning = "".join(e.text for e in events if e.kind == "reasoning")
    content = "".join(e.text for e in events if e.kind == "content")
    if reasoning:
        delta["reasoning"] = delta["reasoning_content"] = reasoning
    if content:
        delta["content"] = content
    calls: list[dict[str, Any]] = []
    for e in events:
        if e.kind != "tool_call" or e.tool is None:
            continue
        if calls and calls[-1]["index"] == e.tool.index and e.tool.name is None:
            calls[-1]["function"]["arguments"] += e.tool.arguments
            continue
        call: dict[str, Any] = {"index": e.tool.index, "function": {"arguments": e.tool.arguments}}
        if e.tool.name is not None:
            call.update(id=e.tool.id, type="function")
            call["function"]["name"] = e.tool.name
        calls.append(call)
    if calls:
        delta["tool_calls"] = calls
    return delta
